"""The synchronous hub: :class:`Hub` runs an :class:`~rollhub.hubs.async_hub.AsyncHub` on a private
event-loop thread, for trainers that do not run an event loop."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from rollhub.config import RollhubConfig
from rollhub.episode import Episode, EpisodeGroup
from rollhub.hubs.async_hub import AsyncHub
from rollhub.lifetimes.loop_thread import LoopThread, ensure_no_running_loop
from rollhub.plugins import PluginHost
from rollhub.training.step import Policy

__all__ = ["Hub"]


class Hub:
    """Synchronous twin of :class:`AsyncHub`; runs it on a private event-loop thread."""

    def __init__(
        self, config: RollhubConfig, *, host: PluginHost | None = None, run_dir: Path | None = None
    ) -> None:
        ensure_no_running_loop("Hub()")
        self._loop = LoopThread("rollhub-hub")
        self._hub = self._loop.call(_make_async_hub, config, host, run_dir)

    @property
    def weight_version(self) -> int | None:
        """The policy version new rollouts are served by."""
        return self._hub.weight_version

    def set_weight_version(self, version: int) -> None:
        """Record a new policy version."""
        self._loop.call_soon(self._hub.set_weight_version, version)

    def publish_policy(self, policy: Policy, version: int) -> None:
        """Hand a new policy to the sampling side and make ``version`` current."""
        self._loop.run(self._hub.publish_policy(policy, version))

    def start(self) -> Hub:
        """Start every component."""
        self._loop.run(self._hub.start())
        return self

    def close(self) -> dict[str, Any]:
        """Stop every component and the loop thread."""
        try:
            return self._loop.run(self._hub.close())
        finally:
            self._loop.stop()

    def __enter__(self) -> Hub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run_episode(
        self,
        payload: Mapping[str, Any],
        group_id: str,
        index: int,
        *,
        sampling: Mapping[str, Any] | None = None,
    ) -> Episode:
        """Run one sample to its terminal episode; ``sampling`` is merged over
        ``[experiment] sampling`` for this rollout only."""
        return self._loop.run(self._hub.run_episode(payload, group_id, index, sampling=sampling))

    def run_group(
        self,
        payload: Mapping[str, Any],
        n: int | None = None,
        *,
        group_id: str | None = None,
        sampling: Mapping[str, Any] | None = None,
    ) -> EpisodeGroup:
        """Run ``n`` samples of one prompt and return the finished group; ``sampling`` is
        merged over ``[experiment] sampling`` for this group's rollouts only."""
        return self._loop.run(self._hub.run_group(payload, n, group_id=group_id, sampling=sampling))

    def iter_groups(
        self, payloads: Iterable[Mapping[str, Any]], n: int | None = None
    ) -> Iterator[EpisodeGroup]:
        """Yield groups in completion order. Leaving the loop early cancels the rest."""
        yield from self._loop.iterate(self._hub.iter_groups(payloads, n))

    # Async handle, for code on another event loop of the process (see rollhub.hubs.hosted)

    @property
    def async_hub(self) -> AsyncHub:
        """The :class:`AsyncHub` this twin drives. It lives on :attr:`loop_thread`: run its
        coroutines there (``await hub.loop_thread.run_async(hub.async_hub.run_episode(...))``
        from another event loop), never on another loop."""
        return self._hub

    @property
    def loop_thread(self) -> LoopThread:
        """The loop thread the hub runs on."""
        return self._loop


def _make_async_hub(
    config: RollhubConfig, host: PluginHost | None, run_dir: Path | None
) -> AsyncHub:
    return AsyncHub(config, host=host, run_dir=run_dir)
