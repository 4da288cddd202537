"""Rewards that score a group's episodes together (a judge ranking them), and their cost.

After every episode of a group has its own reward components
(``rollhub_collect_rewards``), the hub calls ``rollhub_collect_group_rewards`` once for the
group. Each implementation returns components per episode id; they are merged into each
episode's components (a name the episode already has is an error) and its reward is
recomputed with ``[rewards] weights``. Only episodes that ended ``ok`` are scored. A hook
that fails makes every ``ok`` episode of the group a reward failure (status
``infra_error``, a :class:`~rollhub.errors.RewardError`): the group has no trustworthy
reward, and it is kept out of training whatever the failure policy.

What scoring costs goes in ``group.metrics`` (``{"judge": {"calls": 1, "s": 0.8, …}}``);
:func:`group_reward_metrics` sums it per step (``judge_calls``, ``judge_s``, …).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from rollhub.episode import EpisodeGroup
from rollhub.errors import RewardError
from rollhub.plugin_host.hook_calls import call_all

if TYPE_CHECKING:
    from rollhub.hubs.view import HubView

__all__ = ["apply_group_rewards", "collect_group_rewards", "group_reward_metrics"]

log = logging.getLogger(__name__)


async def collect_group_rewards(hub: HubView, group: EpisodeGroup) -> None:
    """Call the group reward hooks for ``group`` and merge what they return."""
    if not any(e.ok for e in group.episodes):
        return
    try:
        parts = await call_all(hub.hook.rollhub_collect_group_rewards, group=group, hub=hub)
        apply_group_rewards(group, parts, hub.config.rewards.weights)
    except Exception as exc:
        err = (
            exc
            if isinstance(exc, RewardError)
            else RewardError(
                f"a group reward hook failed for group {group.group_id!r}: "
                f"{type(exc).__name__}: {exc}"
            )
        )
        log.warning("group %s: %s", group.group_id, err)
        for e in group.episodes:
            if e.ok:
                e.fail(err)


def apply_group_rewards(
    group: EpisodeGroup,
    parts: Iterable[Mapping[str, Mapping[str, float]] | None],
    weights: Mapping[str, float],
) -> None:
    """Merge per-episode components into ``group``'s ``ok`` episodes; recompute rewards.

    :raises RewardError: an unknown episode id, a component name the episode already has,
        or a value that is not a finite number.
    """
    by_id = {e.episode_id: e for e in group.episodes if e.ok}
    touched = set()
    for part in parts:
        for episode_id, components in (part or {}).items():
            episode = by_id.get(episode_id)
            if episode is None:
                raise RewardError(
                    f"a group reward hook scored episode {episode_id!r}, which is not an ok "
                    f"episode of group {group.group_id!r}"
                )
            for name, value in components.items():
                if name in episode.reward_components:
                    raise RewardError(
                        f"reward component {name!r} was returned twice for episode "
                        f"{episode_id!r}; rename one"
                    )
                if (
                    isinstance(value, bool)
                    or not isinstance(value, int | float)
                    or not (math.isfinite(value))
                ):
                    raise RewardError(
                        f"reward component {name!r} must be a finite number, got {value!r}"
                    )
                episode.reward_components[name] = float(value)
            touched.add(episode_id)
    for episode_id in touched:
        episode = by_id[episode_id]
        episode.reward = sum(
            weights.get(name, 1.0) * value for name, value in episode.reward_components.items()
        )


def group_reward_metrics(groups: Iterable[EpisodeGroup]) -> dict[str, float]:
    """The numbers of every group's ``metrics`` tables, summed: ``{"judge": {"calls": 1}}``
    in two groups is ``{"judge_calls": 2}``."""
    out: dict[str, float] = {}
    for group in groups:
        for table, values in group.metrics.items():
            if not isinstance(values, Mapping):
                continue
            for key, value in values.items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    name = f"{table}_{key}"
                    out[name] = round(out.get(name, 0) + value, 4)
    return out
