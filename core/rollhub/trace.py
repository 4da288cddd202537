"""The trainer-neutral trace schema: exact token ids, loss mask and logprobs of a rollout.

A :class:`TraceRecord` is one linear token sequence of one session branch::

    prompt_ids            response_ids
    [p0 p1 … pk]          [s s s s | e e e | s s s | e e | s s]
                           turn 0    tool    turn 1  tool  turn 2
    response_mask          1 1 1 1   0 0 0   1 1 1   0 0   1 1
    response_logprobs      l l l l   0 0 0   l l l   0 0   l l

``response_mask`` is 1 exactly on tokens the model sampled (they are trained) and 0 on
tokens the environment added (tool results, the next user message, the generation prompt).
``response_logprobs`` holds the sampler's logprob of each sampled token and 0.0 elsewhere.

When the agent rewrote its history (edited messages, compaction, a sub-agent, a template
that strips earlier reasoning), the new prompt no longer extends the old sequence. The
session then *forks*: a new record starts whose ``prompt_ids`` are the new full prompt, and
``parent_branch_id``/``fork_turn`` say where it came from. Sampled tokens of earlier turns
stay in the record that sampled them, so nothing is trained twice.

Drift (``TurnSpan.drift``) says how a call's prompt met the session's earlier ids:
``append`` (the prompt is the previous prompt + sampled ids + the template's tail: the
record simply grows), ``rerender`` (the template itself rewrote the history, e.g. dropped
earlier reasoning: the whole prompt was rendered again and a new record starts) and
``fork`` (the agent edited or replayed its history, or a sub-agent started: a new record
branches off ``parent_branch_id`` at ``fork_turn``, sharing the prefix as prompt).
``TurnSpan.masked_tokens`` counts sampled tokens of earlier turns that a re-rendered
prompt no longer shows as sampled (they stay trained in the record that sampled them).
The gateway puts the session's drift counts in ``metadata["drift"]``.

This maps one-to-one onto verl's ``AgentLoopOutput`` (prompt_ids, response_ids,
response_mask, response_logprobs), slime's ``Sample`` (tokens = prompt + response,
response_length, loss_mask, rollout_log_probs), Tinker's ``Datum`` (full sequence shifted by
one, advantages on mask-1 positions) and rLLM's per-call traces (:meth:`TraceRecord.calls`).

Schema version 1. Fields are only ever added; a reader checks ``schema_version``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

SCHEMA_VERSION = 1

DriftKind = Literal["append", "rerender", "fork"]

__all__ = [
    "SCHEMA_VERSION",
    "DriftKind",
    "TraceRecord",
    "TurnCall",
    "TurnSpan",
    "last_call_index",
]


class TurnSpan(BaseModel):
    """One model call inside a record: where its sampled tokens sit in ``response_ids``."""

    model_config = ConfigDict(extra="allow")

    turn_index: int = Field(description="index of the call within the session (0-based)")
    start: int = Field(description="offset of the first sampled token in response_ids")
    end: int = Field(description="offset one past the last sampled token")
    finish_reason: str = Field("stop", description="stop | length | tool_calls | abort | error")
    weight_version: int | None = Field(None, description="policy version that sampled it")
    drift: DriftKind = Field("append", description="how this call's prompt met the last one")
    ill_formed: bool = Field(False, description="output could not be parsed (e.g. bad JSON)")
    masked_tokens: int = Field(
        0, description="sampled tokens of earlier turns this call's re-rendered prompt dropped"
    )
    policy: str | None = Field(
        None, description="the policy that sampled it ([[policies]]; None: the only one)"
    )


class TurnCall(BaseModel):
    """One model call as a standalone pair, the shape per-call consumers (rLLM) expect."""

    turn_index: int
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    weight_version: int | None = None


class TraceRecord(BaseModel):
    """One linear token sequence of one session branch. See the module docstring."""

    model_config = ConfigDict(extra="allow")

    schema_version: int = SCHEMA_VERSION
    session_id: str
    branch_id: int = 0
    parent_branch_id: int | None = None
    fork_turn: int | None = Field(None, description="turn at which this branch forked off")
    prompt_ids: list[int]
    response_ids: list[int] = Field(default_factory=list)
    response_mask: list[int] = Field(default_factory=list)
    response_logprobs: list[float] = Field(default_factory=list)
    turns: list[TurnSpan] = Field(default_factory=list)
    finish_reason: str = "stop"
    model_id: str | None = None
    policy: str | None = Field(
        None,
        description="the policy that sampled every turn of this record ([[policies]]; a "
        "record never mixes policies); None: a run with one policy",
    )
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _aligned(self) -> TraceRecord:
        n = len(self.response_ids)
        if len(self.response_mask) != n or len(self.response_logprobs) != n:
            raise ValueError(
                f"trace of session {self.session_id!r} branch {self.branch_id}: "
                f"response_ids ({n}), response_mask ({len(self.response_mask)}) and "
                f"response_logprobs ({len(self.response_logprobs)}) must have equal lengths"
            )
        for t in self.turns:
            if not 0 <= t.start <= t.end <= n:
                raise ValueError(f"turn {t.turn_index} span [{t.start}, {t.end}) outside 0..{n}")
        return self

    # Derived views --------------------------------------------------------------------------

    @property
    def full_ids(self) -> list[int]:
        """``prompt_ids + response_ids``."""
        return self.prompt_ids + self.response_ids

    @property
    def num_sampled(self) -> int:
        """How many tokens the model sampled in this record (mask 1)."""
        return sum(self.response_mask)

    @property
    def weight_versions(self) -> list[int | None]:
        """The policy version of each turn, in order."""
        return [t.weight_version for t in self.turns]

    def calls(self) -> list[TurnCall]:
        """Per-call (prompt, completion) pairs: the shape rLLM and per-turn trainers use."""
        out: list[TurnCall] = []
        full = self.full_ids
        base = len(self.prompt_ids)
        for t in self.turns:
            out.append(
                TurnCall(
                    turn_index=t.turn_index,
                    prompt_ids=full[: base + t.start],
                    completion_ids=self.response_ids[t.start : t.end],
                    logprobs=self.response_logprobs[t.start : t.end],
                    finish_reason=t.finish_reason,
                    weight_version=t.weight_version,
                )
            )
        return out


def last_call_index(records: Sequence[TraceRecord]) -> int | None:
    """Position of the record holding a session's last model call that produced tokens:
    what a trainer taking one completion per episode (TRL, verl's v0 collation) trains.

    Records come in the order their branches were created, not the order turns finished: a
    main agent that hands work to a sub-agent and then answers has its final answer in the
    first record. ``TurnSpan.turn_index`` counts calls across the whole session, so the
    record with the highest index among its token-producing turns holds the last one (a
    tie, only possible without turn spans, goes to the later record). Records without a
    response token are never chosen; None when no record has one.
    """
    best: int | None = None
    best_key = (-2, -1)
    for pos, rec in enumerate(records):
        if not rec.response_ids:
            continue
        key = (max((t.turn_index for t in rec.turns if t.end > t.start), default=-1), pos)
        if key > best_key:
            best, best_key = pos, key
    return best
