"""A session's trajectory: a tree of sampled turns, linearised into :class:`TraceRecord`s.

Every committed turn is a node. Its prompt either *continues* an earlier node (the exact
ids that node saw and sampled, plus the ids of the new tail) or was rendered from scratch.
Nodes that continue one another form a *branch*: one growing id sequence, one record.
A turn that continues a node which already has a successor (the agent replayed an earlier
state, a sub-agent, a retry), or whose prompt was rendered from scratch (the template or
the agent rewrote the history), starts a new branch. A new branch's record holds the shared
prefix as ``prompt_ids`` (mask 0), so no sampled token is trained twice.

Drift counts (``append`` / ``rerender`` / ``fork`` turns and ``masked_tokens``: sampled
tokens that a rewritten history dropped from the model's view) are kept per session and
globally; :func:`global_drift_counts` is what ``/metrics`` reports.

The turn nodes' compact storage is :mod:`.nodes`; a session's record of its turns (the
tree, the journal rows, the weight version of each turn) is :mod:`.record`.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import threading
from array import array
from collections import Counter
from typing import Any

from rollhub.trace import TraceRecord, TurnSpan

from rollhub_gateway.trajectory.nodes import SPAN_FIELDS, Branch, TurnNode, ids_array

__all__ = [
    "SPAN_FIELDS",
    "Branch",
    "TrajectoryTree",
    "TurnNode",
    "global_drift_counts",
    "ids_array",
    "message_key",
    "next_digest",
    "prefix_digests",
]

_GLOBAL = Counter(
    {
        "append": 0,
        "rerender": 0,
        "fork": 0,
        "masked_tokens": 0,
        "ill_formed": 0,
        "window_mismatch": 0,
    }
)
_GLOBAL_LOCK = threading.Lock()


def global_drift_counts() -> dict[str, int]:
    """Process-wide counts of append / rerender / fork turns, masked tokens, ill-formed turns."""
    with _GLOBAL_LOCK:
        return dict(_GLOBAL)


def count_window_mismatch() -> None:
    """Count a window render that disagreed with the whole render (windows then go off)."""
    _count("window_mismatch")


def _count(key: str, n: int = 1) -> None:
    with _GLOBAL_LOCK:
        _GLOBAL[key] += n


def _canon_args(text: object) -> object:
    if isinstance(text, str):
        try:
            return json.loads(text)
        except ValueError:
            return text.strip()
    return text


def message_key(message: dict[str, Any]) -> str:
    """A semantic key of a neutral message for matching histories.

    Ignores what agents routinely drop or regenerate when they send our answer back:
    reasoning, tool call ids, surrounding whitespace, ``None`` vs ``""`` content, and the
    formatting of JSON arguments.
    """
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    key: dict[str, Any] = {"role": message.get("role"), "content": (content or "").strip()}
    calls = message.get("tool_calls") or []
    if calls:
        key["calls"] = [
            [c.get("function", {}).get("name"), _canon_args(c.get("function", {}).get("arguments"))]
            for c in calls
        ]
    if message.get("role") == "tool" and message.get("name"):
        key["name"] = message["name"]
    return json.dumps(key, sort_keys=True, ensure_ascii=False)


class TrajectoryTree:
    """The turns of one session and their branches."""

    def __init__(self, session_id: str, model_id: str | None = None) -> None:
        self.session_id = session_id
        self.model_id = model_id
        self.nodes: list[TurnNode] = []
        self.branches: list[Branch] = []
        self.counts = Counter(
            {"append": 0, "rerender": 0, "fork": 0, "masked_tokens": 0, "ill_formed": 0}
        )
        self._by_history: dict[str, list[TurnNode]] = {}
        self._lock = threading.Lock()

    # Lookup ----------------------------------------------------------------------------------

    def find_parent(
        self, digests: list[str], tools_key: str, policy: str | None = None
    ) -> TurnNode | None:
        """The node with the longest history that a conversation extends, if any.

        :param digests: :func:`prefix_digests` of the new conversation's messages.
        :param tools_key: nodes rendered with the same tools are preferred.
        :param policy: only nodes this policy sampled (a record never mixes policies).
        """
        for n in range(len(digests) - 1, 0, -1):
            hit = [node for node in self._by_history.get(digests[n - 1], ())
                   if node.policy == policy]
            if hit:
                same_tools = [node for node in hit if node.tools_key == tools_key]
                pool = same_tools or hit
                # prefer a branch tip (clean append) and then the latest turn
                tips = [node for node in pool if node.branch and node.branch.tip is node]
                return (tips or pool)[-1]
        return None

    def ids_through(self, node: TurnNode) -> array[int]:
        """The exact ids ``node`` saw and sampled: its prompt followed by its output."""
        assert node.branch is not None
        return node.branch.ids[: node.end]

    def sampled_dropped(self, node: TurnNode, new_prompt: list[int]) -> int:
        """Sampled tokens of ``node``'s sequence that ``new_prompt`` no longer shows as-is.

        A re-rendered history keeps most earlier outputs (answers, tool calls) but drops
        or rewrites some (reasoning, end markers); the ids of ``node``'s sequence are
        aligned with the new prompt and the sampled ones left unmatched are counted.
        """
        assert node.branch is not None
        b = node.branch
        old = b.ids[: node.end].tolist()
        lcp = 0
        for x, y in zip(old, new_prompt, strict=False):
            if x != y:
                break
            lcp += 1
        kept = [False] * (len(old) - lcp)
        matcher = difflib.SequenceMatcher(None, old[lcp:], new_prompt[lcp:], autojunk=False)
        for block in matcher.get_matching_blocks():
            for i in range(block.a, block.a + block.size):
                kept[i] = True
        dropped = 0
        for i, k in enumerate(kept):
            pos = lcp + i - b.prompt_len
            if not k and pos >= 0 and b.mask[pos]:
                dropped += 1
        return dropped

    # Commit ----------------------------------------------------------------------------------

    def add(self, node: TurnNode, *, recovered: bool = False) -> TurnNode:
        """Record a sampled turn; returns it with its branch set.

        :param recovered: the turn is replayed from the journal; it was counted in the
            process-wide drift counts of the process that sampled it.
        """
        with self._lock:
            base = node.base
            if base is not None and base.branch is not None and base.branch.tip is base:
                branch = base.branch
            else:
                if base is not None:
                    prompt = self.ids_through(base)
                    prompt.extend(node.extra_ids)
                    parent_branch = base.branch.id if base.branch else None
                    fork_turn: int | None = base.index
                    if node.drift == "append":
                        node.drift = "fork"  # a concurrent turn took the tip first
                else:
                    prompt = array("i", node.extra_ids)
                    if node.drift == "append" and self.branches:
                        # prepared as the session's first turn, but a concurrent first
                        # turn committed before it: this one starts a second record
                        node.drift = "fork"
                    origin = node.parent
                    parent_branch = origin.branch.id if origin and origin.branch else None
                    fork_turn = origin.index if origin else None
                branch = Branch(len(self.branches), parent_branch, fork_turn, len(prompt), prompt,
                                policy=node.policy)
                self.branches.append(branch)
            if branch.tip is not None:  # continuing: the tail is environment text
                branch.tip.sent = None  # only tips are matched by plain equality
                branch.tip.answer_key = ""
                branch.ids.extend(node.extra_ids)
                branch.mask.extend(bytes(len(node.extra_ids)))
            start = len(branch.ids) - branch.prompt_len
            branch.ids.extend(node.output_ids)
            branch.mask.extend(b"\x01" * len(node.output_ids))
            branch.logprobs.extend(node.logprobs)
            branch.spans.append(
                (node.index, start, start + len(node.output_ids), node.finish_reason,
                 node.weight_version, node.drift, node.ill_formed, node.masked_tokens,
                 node.policy)
            )  # fmt: skip
            branch.tip = node
            node.branch = branch
            node.end = len(branch.ids)
            if node.parent is not None:
                node.parent.children += 1
            self.nodes.append(node)
            self._by_history.setdefault(node.history_digest, []).append(node)
            self._count(node, recovered=recovered)
            return node

    def _count(self, node: TurnNode, *, recovered: bool) -> None:
        keys = [(node.drift, 1), ("masked_tokens", node.masked_tokens),
                ("ill_formed", int(node.ill_formed))]  # fmt: skip
        for key, n in keys:
            if n:
                self.counts[key] += n
                if not recovered:
                    _count(key, n)

    # Records ---------------------------------------------------------------------------------

    def records(self) -> list[TraceRecord]:
        """One record per branch, in branch order, with drift counts in ``metadata``."""
        with self._lock:
            out = []
            for b in self.branches:
                last = b.spans[-1][3] if b.spans else "stop"
                out.append(
                    TraceRecord(
                        session_id=self.session_id,
                        branch_id=b.id,
                        parent_branch_id=b.parent_id,
                        fork_turn=b.fork_turn,
                        prompt_ids=b.ids[: b.prompt_len].tolist(),
                        response_ids=b.ids[b.prompt_len :].tolist(),
                        response_mask=list(b.mask),
                        response_logprobs=_response_logprobs(b),
                        turns=[TurnSpan(**dict(zip(SPAN_FIELDS, s))) for s in b.spans],  # noqa: B905
                        finish_reason=last,
                        model_id=self.model_id,
                        policy=b.policy,
                        metadata={"drift": dict(self.counts), "num_branches": len(self.branches)},
                    )
                )
            return out


def _response_logprobs(b: Branch) -> list[float]:
    """Logprobs over the whole response: the sampled ones in their spans, 0.0 elsewhere."""
    out = [0.0] * (len(b.ids) - b.prompt_len)
    taken = 0
    for span in b.spans:
        start, end = span[1], span[2]
        out[start:end] = b.logprobs[taken : taken + end - start].tolist()
        taken += end - start
    return out


def prefix_digests(messages: list[dict[str, Any]], start: str = "") -> list[str]:
    """Chained digest of each prefix of a conversation (``[i]`` covers ``messages[: i + 1]``).

    :param start: the digest of the history these messages follow (``""`` at the start).
    """
    out, prev = [], start
    for m in messages:
        prev = next_digest(prev, message_key(m))
        out.append(prev)
    return out


def next_digest(prev: str, key: str) -> str:
    """The chained digest after a history with digest ``prev`` gains a message whose
    :func:`message_key` is ``key``."""
    h = hashlib.blake2b(prev.encode("ascii"), digest_size=16)
    h.update(key.encode("utf-8", "surrogatepass"))
    return h.hexdigest()
