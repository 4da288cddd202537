"""How a session's turns are stored: turn nodes and branches in compact arrays.

A session holds every id of every turn it keeps. As Python lists of ints and floats that
is ~36 bytes an id and ~32 a sampled logprob; here ids take 4 bytes (``array('i')``), the
loss mask 1 (``bytearray``) and logprobs 8 (``array('d')``: the exact float the engine
returned, never rounded). A turn node keeps only the messages it added to its parent's
history, and its prompt tail and logprobs only until its branch holds them.
:class:`~rollhub_gateway.trajectory.TrajectoryTree` builds plain lists for the
:class:`~rollhub.trace.TraceRecord` it hands out.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from rollhub.errors import GatewayError
from rollhub.trace import DriftKind

__all__ = ["SPAN_FIELDS", "Branch", "TurnNode", "ids_array"]


class TurnNode:
    """One committed model call.

    Ids and logprobs are kept in compact arrays (4 bytes an id, 8 a logprob: the exact
    float the engine returned); :meth:`release` drops the copies its branch holds. ``messages`` is the history through this turn's
    assistant message, in neutral form (templates get theirs when rendering); a node whose history extends its parent's keeps only the
    messages it added and rebuilds the rest from the parent when asked.
    """

    __slots__ = (
        "__weakref__",
        "_full",
        "_out",
        "_own",
        "_up",
        "answer_key",
        "base",
        "branch",
        "children",
        "drift",
        "end",
        "extra_ids",
        "finish_reason",
        "history_digest",
        "ill_formed",
        "index",
        "logprobs",
        "masked_tokens",
        "n_out",
        "parent",
        "policy",
        "prompt_text_digest",
        "prompt_text_len",
        "sent",
        "tools_key",
        "weight_version",
    )  # fmt: skip

    def __init__(
        self,
        *,
        index: int,
        parent: TurnNode | None,
        base: TurnNode | None,
        extra_ids: Iterable[int],
        output_ids: Iterable[int],
        logprobs: Iterable[float],
        finish_reason: str,
        weight_version: int | None,
        drift: DriftKind,
        ill_formed: bool,
        masked_tokens: int,
        messages: list[dict[str, Any]],
        history_digest: str,
        prompt_text_len: int | None,
        prompt_text_digest: str | None,
        tools_key: str,
        sent: list[dict[str, Any]] | None = None,
        answer_key: str = "",
        policy: str | None = None,
    ) -> None:
        self.index = index
        self.policy = policy  # the policy that sampled it; a branch holds one policy's turns
        self.parent = parent  # node whose history this turn's messages extend
        self.base = base  # node whose ids this turn's prompt continues
        self.extra_ids = ids_array(extra_ids)  # prompt ids after ``base``'s ids
        self._out: array[int] | None = ids_array(output_ids)
        self.n_out = len(self._out)
        self.logprobs = array("d", logprobs)
        self.finish_reason = finish_reason
        self.weight_version = weight_version
        self.drift: DriftKind = drift
        self.ill_formed = ill_formed
        self.masked_tokens = masked_tokens
        self.history_digest = history_digest  # prefix_digests(keys)[-1] of that history
        self.prompt_text_len = prompt_text_len  # None: rendered over a window only
        self.prompt_text_digest = prompt_text_digest
        self.tools_key = tools_key
        #: the request's messages as the agent sent them (kept on branch tips only)
        self.sent = sent
        self.answer_key = answer_key  # message_key of our assistant message
        self.branch: Branch | None = None
        self.end = 0  # offset in branch.ids one past this turn's output
        self.children = 0
        self._up: TurnNode | None
        self._own: list[dict[str, Any]]
        up = parent._full if parent is not None else None
        # a list comparison in C (identical items compare at once): the history is
        # built from the parent's, so this holds on every continued turn
        if (
            parent is not None and up is not None
            and len(messages) >= len(up) and messages[: len(up)] == up
        ):  # fmt: skip
            self._up, self._own = parent, messages[len(up) :]
            parent._full = None  # only the newest turn keeps it
        else:
            self._up, self._own = None, list(messages)
        self._full: list[dict[str, Any]] | None = messages

    def release(self) -> None:
        """Drop what the turn's branch holds once the turn is in it (and in the journal):
        the prompt tail and logprobs (reading them afterwards raises AttributeError) and
        the sampled ids (:attr:`output_ids` then reads them from the branch)."""
        del self.extra_ids, self.logprobs
        self._out = None

    @property
    def output_ids(self) -> array[int]:
        """The ids this turn sampled."""
        if self._out is not None:
            return self._out
        assert self.branch is not None, "a released turn is in a branch"
        return self.branch.ids[self.end - self.n_out : self.end]

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The history through this turn's assistant message (neutral form)."""
        if self._full is not None:
            return self._full
        chain: list[list[dict[str, Any]]] = []
        node: TurnNode | None = self
        while node is not None and node._full is None:
            chain.append(node._own)
            node = node._up
        full = node._full if node is not None else None  # the loop stops at a kept history
        out = list(full) if full is not None else []
        for own in reversed(chain):
            out += own
        return out


@dataclass(slots=True)
class Branch:
    """One linear id sequence: the record of one session branch.

    ``ids`` (4 bytes each), ``mask`` (1 byte) and ``logprobs`` (8 bytes, exactly as
    sampled; sampled ids only, in order: the environment's ids have none) are arrays; ``spans`` are plain tuples (:data:`SPAN_FIELDS`) until
    :meth:`TrajectoryTree.records` makes them :class:`TurnSpan` objects.
    """

    id: int
    parent_id: int | None
    fork_turn: int | None
    prompt_len: int
    ids: array[int]
    mask: bytearray = field(default_factory=bytearray)
    logprobs: array[float] = field(default_factory=lambda: array("d"))
    spans: list[tuple[Any, ...]] = field(default_factory=list)
    tip: TurnNode | None = None
    policy: str | None = None


#: the order of a span tuple's fields
SPAN_FIELDS = (
    "turn_index", "start", "end", "finish_reason", "weight_version", "drift", "ill_formed",
    "masked_tokens", "policy",
)  # fmt: skip


def ids_array(ids: Iterable[int]) -> array[int]:
    """Token ids as a compact array (an id past 32 bits is a bug of the engine or tokenizer)."""
    try:
        return ids if isinstance(ids, array) and ids.typecode == "i" else array("i", ids)
    except OverflowError as exc:
        raise GatewayError(
            f"a token id does not fit 32 bits ({exc}); token ids must be vocabulary indices",
            field="token_ids",
        ) from exc
