"""Episodes → ``tinker.Datum``s for the RL losses (``importance_sampling``, ``ppo``, ``cispo``).

For each :class:`~rollhub.trace.TraceRecord` of an episode (a forked session has several;
each becomes its own Datum)::

    full          = prompt_ids + response_ids
    model_input   = full[:-1]
    target_tokens = full[1:]                       (position j predicts full[j + 1])
    logprobs[j]   = the sampler's logprob of full[j + 1] where the model sampled it, else 0
    advantages[j] = the episode's advantage      where the model sampled full[j + 1], else 0

so tool results, the next user message and the prompt are never trained, and the sampler
logprobs are exactly the behaviour policy's. A record longer than ``max_length`` tokens is
cut at ``max_length`` (its tail is not trained) and counted; a record whose prompt alone
reaches ``max_length`` is dropped and counted. Nothing is retokenised.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from rollhub.episode import Episode
from rollhub.trace import TraceRecord

__all__ = ["DatumArrays", "DatumStats", "episode_datums", "record_arrays", "to_tinker"]


@dataclass(frozen=True)
class DatumArrays:
    """One Datum's content as plain lists (what :func:`to_tinker` sends)."""

    model_input: list[int]
    target_tokens: list[int]
    logprobs: list[float]
    advantages: list[float]
    episode_id: str
    branch_id: int

    @property
    def trained_tokens(self) -> int:
        """Positions that carry a (sampled) target."""
        return sum(1 for a, lp in zip(self.advantages, self.logprobs, strict=True) if a or lp)


@dataclass
class DatumStats:
    """What the conversion did, for the step's metrics."""

    datums: int = 0
    trained_tokens: int = 0
    truncated_records: int = 0
    truncated_tokens: int = 0
    dropped_records: int = 0
    empty_records: int = 0
    episode_ids: list[str] = field(default_factory=list)

    def as_metrics(self) -> dict[str, int]:
        """Flat numbers for metrics.jsonl."""
        return {
            "datums": self.datums,
            "trained_tokens": self.trained_tokens,
            "truncated_records": self.truncated_records,
            "truncated_tokens": self.truncated_tokens,
            "dropped_records": self.dropped_records,
        }


def record_arrays(
    record: TraceRecord, advantage: float, *, episode_id: str, max_length: int | None = None,
    stats: DatumStats | None = None,
) -> DatumArrays | None:
    """One record's Datum content (None when nothing of it can be trained)."""
    stats = stats if stats is not None else DatumStats()
    prompt_len = len(record.prompt_ids)
    full = record.prompt_ids + record.response_ids
    if not any(record.response_mask):
        stats.empty_records += 1
        return None
    if max_length is not None and len(full) > max_length:
        if prompt_len >= max_length:
            stats.dropped_records += 1
            return None
        stats.truncated_records += 1
        stats.truncated_tokens += len(full) - max_length
        full = full[:max_length]
    n = len(full) - 1
    logprobs = [0.0] * n
    advantages = [0.0] * n
    for j in range(max(prompt_len - 1, 0), n):
        r = j + 1 - prompt_len  # index of target full[j + 1] in the response
        if record.response_mask[r]:
            logprobs[j] = float(record.response_logprobs[r])
            advantages[j] = float(advantage)
    if not any(a or lp for a, lp in zip(advantages, logprobs, strict=True)):
        stats.empty_records += 1  # every sampled token was cut away
        return None
    arrays = DatumArrays(full[:-1], full[1:], logprobs, advantages, episode_id, record.branch_id)
    stats.datums += 1
    stats.trained_tokens += arrays.trained_tokens
    return arrays


def episode_datums(
    pairs: Iterable[tuple[Episode, float]], *, max_length: int | None = None,
    skip_zero_advantage: bool = True,
) -> tuple[list[DatumArrays], DatumStats]:
    """Datum contents of ``(episode, advantage)`` pairs, one per trace record.

    ``skip_zero_advantage`` leaves out episodes whose advantage is 0: under the RL losses
    they contribute no gradient, only compute.
    """
    stats = DatumStats()
    out: list[DatumArrays] = []
    for episode, advantage in pairs:
        if skip_zero_advantage and advantage == 0.0:
            continue
        for record in episode.traces:
            arrays = record_arrays(
                record, advantage, episode_id=episode.episode_id, max_length=max_length,
                stats=stats,
            )
            if arrays is not None:
                out.append(arrays)
                stats.episode_ids.append(episode.episode_id)
    return out, stats


def to_tinker(arrays: DatumArrays) -> Any:
    """The ``tinker.Datum`` (the SDK is imported here, not at module import)."""
    import tinker

    # plain lists: the SDK turns each into its TensorData
    inputs: dict[str, Any] = {
        "target_tokens": arrays.target_tokens,
        "logprobs": arrays.logprobs,
        "advantages": arrays.advantages,
    }
    return tinker.Datum(
        model_input=tinker.ModelInput.from_ints(arrays.model_input), loss_fn_inputs=inputs
    )
