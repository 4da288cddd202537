"""What hooks and trainers see of a hub: the :class:`HubView` protocol.

:class:`~rollhub.hubs.async_hub.AsyncHub` satisfies it. It lives apart from :mod:`rollhub.hubs.async_hub` so
that the hook specifications and the trainer interface can name the hub they are handed
without importing the hub module, which imports them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from pluggy import HookRelay

from rollhub.config import RollhubConfig
from rollhub.episode import Episode, EpisodeGroup
from rollhub.runtime import Runtime
from rollhub.stores.base import ResultStore
from rollhub.tokens import TokenSource
from rollhub.training.step import Policy

__all__ = ["HubView"]


class HubView(Protocol):
    """A started hub, as plugin hooks and driving trainers use it.

    The component properties raise :class:`~rollhub.errors.UsageError` before the hub
    has started.
    """

    config: RollhubConfig
    exp_id: str
    run_dir: Path | None
    stats: dict[str, Any]

    @property
    def hook(self) -> HookRelay:
        """The pluggy hook relay (``hub.hook.rollhub_…(...)``)."""
        ...

    @property
    def runtime(self) -> Runtime:
        """Where rollouts run."""
        ...

    @property
    def store(self) -> ResultStore:
        """Where agents write their results."""
        ...

    @property
    def token_source(self) -> TokenSource:
        """Where the sampled tokens of each rollout are captured."""
        ...

    @property
    def weight_version(self) -> int | None:
        """The policy version new rollouts are served by."""
        ...

    def set_weight_version(self, version: int) -> None:
        """Record a new policy version."""
        ...

    async def publish_policy(self, policy: Policy, version: int) -> None:
        """Hand a new policy to the sampling side and make ``version`` current."""
        ...

    async def run_episode(
        self,
        payload: Mapping[str, Any],
        group_id: str,
        index: int,
        *,
        sampling: Mapping[str, Any] | None = None,
    ) -> Episode:
        """Run one sample to its terminal episode; ``sampling`` is merged over
        ``[experiment] sampling`` for this rollout only."""
        ...

    async def run_group(
        self,
        payload: Mapping[str, Any],
        n: int | None = None,
        *,
        group_id: str | None = None,
        sampling: Mapping[str, Any] | None = None,
    ) -> EpisodeGroup:
        """Run ``n`` samples of one prompt and return the finished group; ``sampling`` is
        merged over ``[experiment] sampling`` for this group's rollouts only."""
        ...

    def iter_groups(
        self, payloads: Iterable[Mapping[str, Any]], n: int | None = None
    ) -> AsyncIterator[EpisodeGroup]:
        """Yield groups in completion order."""
        ...
