"""The rows of the embedded engine's batch and the pass each step runs over them.

A row's states are ``span[:span_len]`` (shared) then ``private`` positions of its slot.
Each step forwards, in one pass (:class:`~.decoder.Pass`): the last sampled token of every
decoding row (one position of its slot), then as much of the pending prompts as the
budget allows: shared prefills (:class:`Build`) first, into their spans, then rows'
private prompt tails, into their slots. A prompt completed in the pass gives the logits
its rows draw their first token from.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rollhub.sampling import Generation, SamplingParams, TokenChunk

from .decoder import Chunk, Group, Pass
from .kv_store import SlotCache, Span

__all__ = ["Build", "Progress", "Row", "plan_pass"]

Emit = Callable[[TokenChunk | Generation | BaseException], None]


@dataclass(eq=False)
class Row:
    """One request inside the engine. ``aborted`` may be set from any thread."""

    prompt_ids: list[int]
    params: SamplingParams
    max_tokens: int
    stop_ids: frozenset[int]
    emit: Emit
    generator: Any = None
    decode: Callable[[list[int]], str] | None = None
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    aborted: bool = False
    submitted_at: float = field(default_factory=time.perf_counter)
    first_token_at: float | None = None
    max_batch: int = 0
    # where its states are: span[:span_len], then `private` positions of its slot
    span: Span | None = None
    span_len: int = 0
    private: int = 0
    feed: list[int] = field(default_factory=list)  # prompt tokens still to forward (slot)
    build: Build | None = None  # the shared prefill this row waits for

    @property
    def cached(self) -> int:
        """Tokens of this row whose states are held."""
        return self.span_len + self.private


@dataclass(eq=False)
class Build:
    """One prompt prefilled into a new span for every row in ``rows`` (identical prompts)."""

    prompt: list[int]
    span: Span
    feed: list[int]
    rows: list[Row]


@dataclass
class Progress:
    """What a pass advanced: prompt tokens forwarded, prompts completed (builds and
    private tails), and per completed prompt its logits row and the rows drawing from it."""

    prefill_tokens: int = 0
    built: list[Build] = field(default_factory=list)
    tails_done: int = 0
    firsts: list[tuple[int, list[Row]]] = field(default_factory=list)


def plan_pass(
    rows: list[Row], builds: list[Build], slots: SlotCache, budget: int
) -> tuple[Pass, Progress]:
    """The pass of one step over ``rows`` (row i holds slot i) and pending ``builds``.

    Prompt progress is booked here, before the pass runs (a pass that fails fails every
    row it touched); completed builds are removed from ``builds`` and returned, their rows
    still to be pointed at the new span by the caller.
    """
    step = Pass(tokens=[], positions=[], rows=len(rows))
    done = Progress()
    groups: dict[int, Group] = {}
    for slot, row in enumerate(rows):
        if row.build is not None or row.feed or not row.token_ids:
            step.slot_len.append(max(row.private, 1))
            continue
        assert row.span is not None
        step.tokens.append(row.token_ids[-1])
        step.positions.append(row.cached)
        step.decode_slots.append(slot)
        step.decode_write.append(row.private)
        step.slot_len.append(row.private + 1)
        group = groups.get(id(row.span))
        if group is None:
            group = groups[id(row.span)] = Group(row.span, [], [])
        group.slots.append(slot)
        group.lengths.append(row.span_len)
    step.groups = list(groups.values())
    step.sample = list(range(len(step.tokens)))
    for build in list(builds):
        if all(r.aborted for r in build.rows):
            builds.remove(build)
            continue
        if budget <= 0:
            break
        span, take = build.span, build.feed[:budget]
        start = len(step.tokens)
        step.chunks.append(Chunk(start, len(take), span.keys, span.values, span.length))
        step.tokens.extend(take)
        step.positions.extend(range(span.length, span.length + len(take)))
        budget -= len(take)
        done.prefill_tokens += len(take)
        span.length += len(take)
        build.feed = build.feed[len(take) :]
        if not build.feed:
            builds.remove(build)
            done.built.append(build)
            done.firsts.append((len(step.sample), build.rows))
            step.sample.append(len(step.tokens) - 1)
    for slot, row in enumerate(rows):
        if not row.feed or budget <= 0:
            continue
        take = row.feed[:budget]
        keys, values = slots.layers(slot)
        step.chunks.append(
            Chunk(len(step.tokens), len(take), keys, values, row.private, row.span, row.span_len)
        )
        step.tokens.extend(take)
        step.positions.extend(range(row.cached, row.cached + len(take)))
        budget -= len(take)
        row.private += len(take)
        step.slot_len[slot] = row.private
        row.feed = row.feed[len(take) :]
        done.prefill_tokens += len(take)
        if not row.feed:
            done.tails_done += 1
            done.firsts.append((len(step.sample), [row]))
            step.sample.append(len(step.tokens) - 1)
    return step, done
