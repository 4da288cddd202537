r"""A session's record of its sampled turns: each committed turn becomes a
:class:`~rollhub_gateway.trajectory.TurnNode` in the session's tree and a journal row, and
the tree gives the session's :class:`~rollhub.trace.TraceRecord`\ s.

The weight version of a turn is decided here, once (:func:`stamped_version`); the records
carry it to the hub (``TraceRecord.turns[i].weight_version``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

from rollhub.errors import GatewayError
from rollhub.sampling import Generation
from rollhub.trace import DriftKind, TraceRecord

from rollhub_gateway.chat_templates.render import TemplateRenderer, text_digest
from rollhub_gateway.journal import SessionJournal
from rollhub_gateway.journal.entries import journal_entry, rebuild
from rollhub_gateway.trajectory import TrajectoryTree, TurnNode, message_key, next_digest
from rollhub_gateway.turns import ParsedOutput, PreparedTurn

__all__ = [
    "ConversationModel",
    "PendingTurn",
    "TurnRecords",
    "stamped_version",
]

log = logging.getLogger(__name__)


class ConversationModel(Protocol):
    """What a conversation reads of its chat model (:class:`~rollhub_gateway.chat_model.HFChatModel`)."""

    model_id: str
    renderer: TemplateRenderer
    journal: SessionJournal | None
    #: continued turns between two checks of a window render against a whole one
    verify_every: int


@dataclass
class PendingTurn:
    """What :meth:`HFConversation.prepare` decided, applied by ``commit``."""

    parent: TurnNode | None
    base: TurnNode | None
    extra_ids: list[int]
    history: list[dict[str, Any]]  # the prompt's messages (neutral form, our answers ours)
    history_digest: str
    prompt_text: str | None
    tools_key: str
    masked: int
    opens_reasoning: bool
    sent: list[dict[str, Any]]  # the request's messages as the agent sent them
    policy: str | None = None  # the policy sampling the turn (several policies)


def stamped_version(generation: Generation, started: int | None) -> int | None:
    """The weight version a sampled turn carries: the version the backend reports for the
    weights that sampled it, else ``started``, the version current when the turn started
    (a weight update while the turn sampled does not relabel it)."""
    return generation.weight_version if generation.weight_version is not None else started


class TurnRecords:
    """The recording half of a conversation (:class:`~rollhub_gateway.conversation.HFConversation`):
    commit, records, finish and discard."""

    model: ConversationModel
    session_id: str
    tree: TrajectoryTree
    finished: bool
    _next_turn: int

    def commit(
        self,
        prepared: PreparedTurn,
        generation: Generation,
        parsed: ParsedOutput,
        *,
        weight_version: int | None = None,
    ) -> DriftKind:
        """Record a sampled turn (journal write included) before the response is sent.

        :param weight_version: the policy version current when the turn started; the
            turn is stamped with :func:`stamped_version` of it.

        :returns: the turn's drift as committed: a turn prepared as an ``append`` is a
            ``fork`` when a concurrent turn took its place first.
        """
        st = prepared.state
        if not isinstance(st, PendingTurn):
            raise GatewayError(
                "commit() needs the PreparedTurn that prepare() of this session returned"
            )
        if len(generation.logprobs) != len(generation.token_ids):
            raise GatewayError(
                f"engine returned {len(generation.token_ids)} token ids but "
                f"{len(generation.logprobs)} logprobs; the trace needs one logprob per id",
                field="logprobs",
            )
        fam = self.model.renderer.family
        assistant = fam.assistant_message(parsed)
        if assistant.get("tool_calls") and not assistant["content"]:
            # as agents send it back (OpenAI replies ``null``), so that the re-sent copy
            # is equal to ours and the session keeps one; None and "" read the same to
            # message_key and become the same template form
            assistant["content"] = None
        answer_key = message_key(assistant)
        asst_digest = next_digest(st.history_digest, answer_key)
        finish = generation.finish_reason
        if parsed.tool_calls and finish == "stop":
            finish = "tool_calls"
        node = TurnNode(
            index=prepared.turn_index,
            parent=st.parent,
            base=st.base,
            extra_ids=st.extra_ids,
            output_ids=generation.token_ids,
            logprobs=generation.logprobs,
            finish_reason=finish,
            weight_version=stamped_version(generation, weight_version),
            drift=prepared.drift,
            ill_formed=parsed.ill_formed,
            masked_tokens=st.masked,
            messages=[*st.history, assistant],
            history_digest=asst_digest,
            prompt_text_len=len(st.prompt_text) if st.prompt_text is not None else None,
            prompt_text_digest=text_digest(st.prompt_text) if st.prompt_text is not None else None,
            tools_key=st.tools_key,
            sent=st.sent,
            answer_key=answer_key,
            policy=st.policy,
        )
        self.tree.add(node)
        if self.model.journal is not None:
            self.model.journal.append(self.session_id, node.index, journal_entry(node))
        node.release()
        return node.drift

    def traces(self) -> list[TraceRecord]:
        """The session's linearised records, one per branch."""
        return self.tree.records()

    def drift_counts(self) -> dict[str, int]:
        """Counts of append / rerender / fork turns, masked tokens and ill-formed turns."""
        return dict(self.tree.counts)

    def finish(self) -> list[TraceRecord]:
        """Close the session: mark it done in the journal and return its records."""
        records = self.traces()
        if self.model.journal is not None:
            self.model.journal.finish(self.session_id)
        self.finished = True
        return records

    def discard(self) -> None:
        """Drop the session and its journal entries without producing records."""
        if self.model.journal is not None:
            self.model.journal.discard(self.session_id)
        self.finished = True

    def _recover(self, entries: list[dict[str, Any]]) -> None:
        """Rebuild the tree from journal entries, in commit order."""
        self._next_turn = rebuild(self.tree, entries, self.model.journal, self.session_id)
        log.info("session %s: recovered %d turns from the journal", self.session_id, len(entries))
