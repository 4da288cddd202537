"""rllm-model-gateway traces → rollhub :class:`~rollhub.trace.TraceRecord`s.

rllm-model-gateway stores one trace per model call: the call's full prompt ids, its
completion ids and their logprobs. rollhub trains on linear records instead, so the calls
are stitched: a call whose prompt extends an earlier record's ``prompt + response`` is
appended to that record (the extension, e.g. a tool result and the next generation prompt,
gets loss mask 0; the completion gets mask 1 and its logprobs). A call whose prompt extends
no record (the agent edited its history, or a sub-agent started) begins a new record that
forks off the record sharing the longest prefix with it.

Only calls that were answered count: a trace without a finish reason and without completion
ids is an upstream error reply (the gateway stores those too) and is skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rollhub.errors import TokenRetrievalError
from rollhub.trace import DriftKind, TraceRecord, TurnSpan

__all__ = ["answered", "stitch"]

log = logging.getLogger(__name__)

_NO_IDS_FIX = (
    "rllm-model-gateway reads token ids only from vLLM-style response fields "
    "(root 'prompt_token_ids', per-choice 'token_ids', 'logprobs.content'); serve the model "
    "with an engine that returns them (vLLM >= 0.11 with return_token_ids)"
)


def answered(trace: Mapping[str, Any]) -> bool:
    """Whether a stored trace is an answered model call (not an upstream error reply)."""
    return trace.get("finish_reason") is not None or bool(trace.get("completion_token_ids"))


@dataclass
class _Branch:
    """A record being built."""

    branch_id: int
    prompt_ids: list[int]
    parent_branch_id: int | None = None
    fork_turn: int | None = None
    model_id: str | None = None
    response_ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turns: list[TurnSpan] = field(default_factory=list)
    trace_ids: list[str] = field(default_factory=list)

    @property
    def full_ids(self) -> list[int]:
        return self.prompt_ids + self.response_ids

    def add(
        self, span_tail: list[int], call: _Call, turn: int, drift: DriftKind, version: int | None
    ) -> None:
        self.response_ids += span_tail
        self.mask += [0] * len(span_tail)
        self.logprobs += [0.0] * len(span_tail)
        start = len(self.response_ids)
        self.response_ids += call.completion_ids
        self.mask += [1] * len(call.completion_ids)
        self.logprobs += call.logprobs
        self.turns.append(
            TurnSpan(
                turn_index=turn,
                start=start,
                end=len(self.response_ids),
                finish_reason=call.finish_reason,
                weight_version=version,
                drift=drift,
            )
        )
        self.trace_ids.append(call.trace_id)


@dataclass(frozen=True)
class _Call:
    trace_id: str
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    model: str | None


def _call_of(trace: Mapping[str, Any], session_id: str, turn: int) -> _Call:
    """Validate one answered trace; a trace without usable ids is a clear error."""
    where = f"session {session_id!r} call {turn} (trace {trace.get('trace_id')!r})"
    prompt = list(trace.get("prompt_token_ids") or [])
    completion = list(trace.get("completion_token_ids") or [])
    logprobs = trace.get("logprobs")
    if not prompt or not completion:
        missing = "prompt_token_ids" if not prompt else "completion_token_ids"
        raise TokenRetrievalError(
            f"{where}: the trace has no {missing}; {_NO_IDS_FIX}",
            session_id=session_id,
            field=missing,
        )
    if logprobs is None or len(logprobs) != len(completion):
        got = "none" if logprobs is None else str(len(logprobs))
        raise TokenRetrievalError(
            f"{where}: {len(completion)} completion ids but {got} logprobs; the engine must "
            f"return a logprob for every sampled token (the gateway asks with logprobs=true)",
            session_id=session_id,
            field="logprobs",
        )
    return _Call(
        trace_id=str(trace.get("trace_id")),
        prompt_ids=prompt,
        completion_ids=completion,
        logprobs=[float(x) for x in logprobs],
        finish_reason=str(trace.get("finish_reason") or "stop"),
        model=trace.get("model") or None,
    )


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def stitch(
    session_id: str,
    traces: Iterable[Mapping[str, Any]],
    *,
    weight_version: int | None = None,
) -> list[TraceRecord]:
    """Stitch one session's answered traces (in call order) into linear records.

    :param weight_version: the policy version stamped on every turn (rllm-model-gateway
        0.1.0 records none itself).
    :raises TokenRetrievalError: a trace lacks prompt or completion ids, or its logprobs do
        not match its completion ids.
    """
    branches: list[_Branch] = []
    drift = {"append": 0, "fork": 0}
    for turn, trace in enumerate(t for t in traces if answered(t)):
        call = _call_of(trace, session_id, turn)
        # the longest record this prompt extends takes the call
        best: _Branch | None = None
        for b in branches:
            full = b.full_ids
            if len(full) <= len(call.prompt_ids) and call.prompt_ids[: len(full)] == full:
                if best is None or len(full) > len(best.full_ids):
                    best = b
        if best is not None:
            best.add(call.prompt_ids[len(best.full_ids) :], call, turn, "append", weight_version)
            drift["append"] += 1
            continue
        parent = max(
            branches, key=lambda b: _common_prefix(b.full_ids, call.prompt_ids), default=None
        )
        branch = _Branch(
            branch_id=len(branches),
            prompt_ids=call.prompt_ids,
            parent_branch_id=parent.branch_id if parent else None,
            fork_turn=turn if parent else None,
            model_id=call.model,
        )
        branch.add([], call, turn, "fork" if parent else "append", weight_version)
        if parent:
            drift["fork"] += 1
        branches.append(branch)
    return [
        TraceRecord(
            session_id=session_id,
            branch_id=b.branch_id,
            parent_branch_id=b.parent_branch_id,
            fork_turn=b.fork_turn,
            prompt_ids=b.prompt_ids,
            response_ids=b.response_ids,
            response_mask=b.mask,
            response_logprobs=b.logprobs,
            turns=b.turns,
            finish_reason=b.turns[-1].finish_reason,
            model_id=b.model_id,
            metadata={
                "source": "rllm-model-gateway",
                "trace_ids": b.trace_ids,
                "drift": dict(drift),
            },
        )
        for b in branches
    ]
