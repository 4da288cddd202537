"""Episodes → ``tinker.Datum``s for the RL losses (``importance_sampling``, ``ppo``, ``cispo``).

For each :class:`~rollhub.trace.TraceRecord` of an episode (a forked session has several;
each becomes its own Datum)::

    full          = prompt_ids + response_ids
    model_input   = full[:-1]
    target_tokens = full[1:]                       (position j predicts full[j + 1])
    logprobs[j]   = the sampler's logprob of full[j + 1] where the model sampled it, else 0
    advantages[j] = the episode's advantage      where the model sampled full[j + 1], else 0

so tool results, the next user message and the prompt are never trained, and the sampler
logprobs are exactly the behaviour policy's. Which records are trained, cut to
``max_length`` or dropped is decided by the core (:mod:`rollhub.training.fitting`); this
module only lays a fitted record out as a Datum. Nothing is retokenised.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rollhub.episode import Episode
from rollhub.trace import TraceRecord
from rollhub.training.fitting import FitStats, FittedRecord, fit_record, fit_records

if TYPE_CHECKING:
    import tinker

__all__ = ["DatumArrays", "DatumStats", "datum_arrays", "episode_datums", "record_arrays",
           "to_tinker"]

#: what the conversion did; the core's statistics of fitting (``datums``, tokens, cuts)
DatumStats = FitStats


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


def datum_arrays(fitted: FittedRecord) -> DatumArrays:
    """A fitted record laid out as a Datum: targets shifted by one, the sampler's logprob
    and the advantage where the target was sampled, 0 elsewhere."""
    full = fitted.full_ids
    prompt_len = len(fitted.prompt_ids)
    n = len(full) - 1
    logprobs = [0.0] * n
    advantages = [0.0] * n
    for j in range(max(prompt_len - 1, 0), n):
        r = j + 1 - prompt_len  # index of target full[j + 1] in the response
        if fitted.response_mask[r]:
            logprobs[j] = fitted.response_logprobs[r]
            advantages[j] = fitted.advantage
    return DatumArrays(
        full[:-1], full[1:], logprobs, advantages, fitted.episode_id, fitted.branch_id
    )


def record_arrays(
    record: TraceRecord, advantage: float, *, episode_id: str, max_length: int | None = None,
    stats: FitStats | None = None,
) -> DatumArrays | None:
    """One record's Datum content (None when nothing of it can be trained)."""
    fitted = fit_record(
        record, advantage, episode_id=episode_id, max_length=max_length, stats=stats
    )
    return datum_arrays(fitted) if fitted is not None else None


def episode_datums(
    pairs: Iterable[tuple[Episode, float]], *, max_length: int | None = None,
    skip_zero_advantage: bool = True,
) -> tuple[list[DatumArrays], FitStats]:
    """Datum contents of ``(episode, advantage)`` pairs, one per trace record
    (:func:`rollhub.training.fitting.fit_records` chooses and cuts them)."""
    fitted, stats = fit_records(
        pairs, max_length=max_length, skip_zero_advantage=skip_zero_advantage
    )
    return [datum_arrays(f) for f in fitted], stats


def to_tinker(arrays: DatumArrays) -> tinker.Datum:
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
