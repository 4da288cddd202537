"""An episode's own reward: the ``rollhub_collect_rewards`` components, weighted and summed.

Each implementation returns named components; they are merged (a duplicate name is an
error) and ``episode.reward`` is their sum weighted by ``[rewards] weights`` (1.0 for a name
not listed). Rewards that score a whole group are :mod:`rollhub.scoring.group_rewards`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rollhub.episode import Episode
from rollhub.errors import RewardError
from rollhub.plugin_host.hook_calls import call_all
from rollhub.scoring.rewards import merge_reward_components

if TYPE_CHECKING:
    from rollhub.hubs.view import HubView

__all__ = ["collect_episode_rewards"]


async def collect_episode_rewards(hub: HubView, episode: Episode) -> None:
    """Set ``episode.reward_components`` and, when there are any, ``episode.reward``.

    :raises RewardError: a hook failed (any other error is wrapped in one).
    """
    try:
        parts = await call_all(hub.hook.rollhub_collect_rewards, episode=episode, hub=hub)
    except RewardError:
        raise
    except Exception as exc:
        raise RewardError(
            f"a reward hook failed for session {episode.session_id!r}: "
            f"{type(exc).__name__}: {exc}",
            session_id=episode.session_id,
        ) from exc
    episode.reward_components = merge_reward_components(parts)
    if episode.reward_components:
        weights = hub.config.rewards.weights
        episode.reward = sum(
            weights.get(name, 1.0) * value for name, value in episode.reward_components.items()
        )
