"""Episode rewards: the reward hooks' components merged, and the failure policy applied.

The hub calls both for every episode group (:mod:`rollhub.hub`); a backend that builds its
own groups (verl's agent loop) applies the same failure policy.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from rollhub.episode import EpisodeGroup
from rollhub.errors import RewardError

__all__ = ["apply_failure_policy", "merge_reward_components"]


def merge_reward_components(parts: Iterable[Mapping[str, float] | None]) -> dict[str, float]:
    """Merge reward hook results; a component named twice or a non-finite value is an error."""
    merged: dict[str, float] = {}
    for part in parts:
        if not part:
            continue
        for name, value in part.items():
            if name in merged:
                raise RewardError(f"reward component {name!r} was returned by two reward hooks; rename one")
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise RewardError(f"reward component {name!r} must be a finite number, got {value!r}")
            merged[name] = float(value)
    return merged


def apply_failure_policy(group: EpisodeGroup, policy: str) -> None:
    """Mark which episodes trainers learn from (``[rewards] on_failure``)."""
    failed = [e for e in group.episodes if not e.ok or e.reward is None]
    for e in group.episodes:
        e.trainable = e.ok and e.reward is not None
    if policy == "drop_group" and failed:
        for e in group.episodes:
            e.trainable = False
    elif policy == "zero_reward":
        for e in failed:
            e.reward = 0.0
            e.metrics["reward_imputed"] = True
            e.trainable = True
