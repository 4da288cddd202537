"""Trace records fitted into training sequences under a length budget, the same for every
backend.

A backend that learns from token ids (torch, Tinker, verl, TRL) needs, per trace record,
the sampled ids and the sampler's logprobs cut to the tokens it can afford, and the
step's account of what was left out. :func:`fit_records` does that once:

- episodes whose advantage is 0 are skipped when asked (no gradient under the RL losses,
  only compute);
- a record with no sampled token (mask all 0) trains nothing and is counted *empty*;
- a record longer than ``max_length`` tokens (prompt + response) is cut there and
  counted *truncated*, with the tokens cut; one whose prompt alone reaches
  ``max_length`` is *dropped*; a cut that leaves no sampled token makes it *empty*.

A backend with fixed prompt and response widths (verl) gives ``prompt_length`` and
``response_length`` instead: a longer prompt keeps its first tokens (the system prompt)
and its tail opens the response with mask 0 (*prompt overflow*: the token sequence the
model saw is unchanged, so the logprobs still line up), and a longer response is cut.

Each backend then only converts a :class:`FittedRecord` into its own format (a Tinker
``Datum``, a torch prompt group, verl's tensors). Nothing is retokenised: the ids are the
ones the sampler saw and produced.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from rollhub.episode import Episode
from rollhub.trace import TraceRecord

__all__ = ["FitStats", "FittedRecord", "fit_record", "fit_records"]


@dataclass(frozen=True)
class FittedRecord:
    """One trace record within the budget: its prompt, and the response tokens kept."""

    prompt_ids: list[int]
    response_ids: list[int]
    #: 1 where the model sampled the token (trained); 0: tool result, template, user
    response_mask: list[int]
    #: the sampler's logprob of each response token (0.0 where the mask is 0)
    response_logprobs: list[float]
    advantage: float
    episode_id: str
    branch_id: int = 0
    #: prompt tokens moved to the head of the response (``prompt_length``)
    prompt_overflow: int = 0
    #: response tokens cut off at the end
    truncated_tokens: int = 0

    @property
    def full_ids(self) -> list[int]:
        """``prompt_ids + response_ids``."""
        return self.prompt_ids + self.response_ids

    @property
    def trained_tokens(self) -> int:
        """Sampled tokens kept: the ones a loss sees."""
        return sum(self.response_mask)

    @property
    def masked_tokens(self) -> int:
        """Response tokens kept that the model did not sample."""
        return len(self.response_mask) - self.trained_tokens


@dataclass
class FitStats:
    """What fitting a step's records did, for the step's metrics."""

    #: records fitted (the ``datums`` metric)
    records: int = 0
    trained_tokens: int = 0
    masked_tokens: int = 0
    truncated_records: int = 0
    truncated_tokens: int = 0
    #: records whose prompt alone reaches the budget
    dropped_records: int = 0
    #: records with no sampled token, before or after the cut
    empty_records: int = 0
    #: prompt tokens moved to the response (``prompt_length``)
    prompt_overflow: int = 0
    #: the episode of each fitted record, in order
    episode_ids: list[str] = field(default_factory=list)

    @property
    def datums(self) -> int:
        """:attr:`records`, under the name the metric (and Tinker) gives it."""
        return self.records

    def add(self, fitted: FittedRecord) -> None:
        """Count one fitted record."""
        self.records += 1
        self.trained_tokens += fitted.trained_tokens
        self.masked_tokens += fitted.masked_tokens
        self.episode_ids.append(fitted.episode_id)

    def as_metrics(self) -> dict[str, int]:
        """Flat numbers for ``metrics.jsonl``."""
        return {
            "datums": self.records,
            "trained_tokens": self.trained_tokens,
            "truncated_records": self.truncated_records,
            "truncated_tokens": self.truncated_tokens,
            "dropped_records": self.dropped_records,
        }


def fit_record(
    record: TraceRecord, advantage: float, *, episode_id: str, max_length: int | None = None,
    prompt_length: int | None = None, response_length: int | None = None,
    keep_empty: bool = False, stats: FitStats | None = None,
) -> FittedRecord | None:
    """One record within the budget; None (and counted) when nothing of it can be trained.
    See the module docstring for what is counted how.

    :param keep_empty: return a record with no sampled token too (still counted *empty*),
        for a backend that needs every record of an episode in place.
    """
    stats = stats if stats is not None else FitStats()
    prompt, ids, mask = list(record.prompt_ids), list(record.response_ids), list(
        record.response_mask
    )
    logprobs = [float(x) for x in record.response_logprobs]
    if not any(mask):
        stats.empty_records += 1
        if not keep_empty:
            return None
    overflow = 0
    if prompt_length is not None and len(prompt) > prompt_length:
        overflow = len(prompt) - prompt_length
        ids = prompt[prompt_length:] + ids
        mask = [0] * overflow + mask
        logprobs = [0.0] * overflow + logprobs
        prompt = prompt[:prompt_length]
        stats.prompt_overflow += overflow
    keep = len(ids) if response_length is None else min(len(ids), response_length)
    if max_length is not None:
        if len(prompt) >= max_length:
            stats.dropped_records += 1
            return None
        keep = min(keep, max_length - len(prompt))
    cut = len(ids) - keep
    if cut:
        stats.truncated_records += 1
        stats.truncated_tokens += cut
        ids, mask, logprobs = ids[:keep], mask[:keep], logprobs[:keep]
        if not any(mask) and any(record.response_mask):
            stats.empty_records += 1  # every sampled token was cut away
            if not keep_empty:
                return None
    fitted = FittedRecord(
        prompt, ids, mask, logprobs, float(advantage), episode_id, record.branch_id,
        prompt_overflow=overflow, truncated_tokens=cut,
    )
    stats.add(fitted)
    return fitted


def fit_records(
    pairs: Iterable[tuple[Episode, float]], *, max_length: int | None = None,
    skip_zero_advantage: bool = True,
) -> tuple[list[FittedRecord], FitStats]:
    """Every trace record of ``(episode, advantage)`` pairs fitted to ``max_length``, in
    order (a forked session's branches are records of their own)."""
    stats = FitStats()
    out: list[FittedRecord] = []
    for episode, advantage in pairs:
        if skip_zero_advantage and advantage == 0.0:
            continue
        for record in episode.traces:
            fitted = fit_record(
                record, advantage, episode_id=episode.episode_id, max_length=max_length,
                stats=stats,
            )
            if fitted is not None:
                out.append(fitted)
    return out, stats
