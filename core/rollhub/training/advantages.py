"""Advantage estimators: plain functions over the rewards of one group.

Each estimator takes the rewards of the group's *trainable* episodes (after the failure
policy of ``[rewards] on_failure``) and returns one advantage per reward, in order. A failed
episode is never given an advantage, so it never contributes a gradient, not even on
padding: :func:`group_advantages` maps advantages back to episode ids and leaves the others
out.

- ``grpo``: ``r_i - mean(r)``, divided by ``std(r) + eps`` (population std), as in GRPO.
- ``grpo_mean``: ``r_i - mean(r)`` without the std normalisation (Dr. GRPO's choice: no
  difficulty bias from groups with tiny variance).
- ``rloo``: ``r_i - mean(r_j for j != i)``, the leave-one-out baseline; equal to
  ``n/(n-1) · (r_i - mean(r))``. A group of one has no baseline: advantage 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Literal

from rollhub.episode import EpisodeGroup
from rollhub.errors import ConfigError

__all__ = [
    "ESTIMATORS",
    "AdvantageEstimator",
    "group_advantages",
    "grpo_advantages",
    "grpo_mean_advantages",
    "rloo_advantages",
]

AdvantageEstimator = Literal["grpo", "grpo_mean", "rloo"]


def grpo_advantages(rewards: Sequence[float], *, eps: float = 1e-6) -> list[float]:
    """``(r_i - mean) / (std + eps)``; a group whose rewards are all equal gets zeros."""
    if not rewards:
        return []
    if max(rewards) == min(rewards):  # no signal; rounding of the mean must not invent one
        return [0.0] * len(rewards)
    mean = sum(rewards) / len(rewards)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
    return [(r - mean) / (std + eps) for r in rewards]


def grpo_mean_advantages(rewards: Sequence[float]) -> list[float]:
    """``r_i - mean``: group-mean baseline without std normalisation."""
    if not rewards:
        return []
    mean = sum(rewards) / len(rewards)
    return [r - mean for r in rewards]


def rloo_advantages(rewards: Sequence[float]) -> list[float]:
    """``r_i - mean of the others`` (leave-one-out); zero for a group of one."""
    n = len(rewards)
    if n < 2:
        return [0.0] * n
    total = sum(rewards)
    return [r - (total - r) / (n - 1) for r in rewards]


ESTIMATORS: dict[str, Callable[[Sequence[float]], list[float]]] = {
    "grpo": grpo_advantages,
    "grpo_mean": grpo_mean_advantages,
    "rloo": rloo_advantages,
}


def group_advantages(group: EpisodeGroup, estimator: str = "grpo") -> dict[str, float]:
    """Advantages of a group's trainable episodes, by episode id.

    The group's failure policy has already run (the hub applies it): episodes with
    ``trainable`` False are left out, so they get no advantage and no gradient.

    :raises ConfigError: unknown ``estimator`` (``training.advantage``).
    """
    try:
        fn = ESTIMATORS[estimator]
    except KeyError:
        raise ConfigError(
            f"unknown advantage estimator {estimator!r} (training.advantage); "
            f"choose one of: {', '.join(ESTIMATORS)}",
            field="training.advantage",
        ) from None
    rewarded = [(e.episode_id, e.reward) for e in group.episodes
                if e.trainable and e.reward is not None]
    values = fn([float(r) for _, r in rewarded])
    return {eid: a for (eid, _), a in zip(rewarded, values, strict=True)}
