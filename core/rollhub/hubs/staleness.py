"""Weight versions and the staleness bound on in-flight rollouts.

Off-policy drift grows with the gap between the policy that sampled a rollout and the one
being trained. With ``[experiment] max_staleness = k``, no new rollout is submitted while
the oldest rollout still in flight was started more than ``k`` versions ago.
"""

from __future__ import annotations

import asyncio

__all__ = ["StalenessGate"]


class StalenessGate:
    """Tracks the current policy version and the versions of in-flight rollouts."""

    def __init__(self, max_staleness: int | None) -> None:
        self.max_staleness = max_staleness
        self.current: int | None = None
        self._inflight: dict[str, int | None] = {}
        self._changed: asyncio.Condition | None = None
        self._wakers: set[asyncio.Task[None]] = set()

    def _cond(self) -> asyncio.Condition:
        if self._changed is None:
            self._changed = asyncio.Condition()
        return self._changed

    def set_current(self, version: int) -> None:
        """Record a new policy version."""
        self.current = version
        self._notify()

    def oldest_inflight(self) -> int | None:
        """The smallest version among rollouts in flight (None when none carry one)."""
        versions = [v for v in self._inflight.values() if v is not None]
        return min(versions) if versions else None

    def blocked(self) -> bool:
        """Whether a new submission must wait."""
        if self.max_staleness is None or self.current is None:
            return False
        oldest = self.oldest_inflight()
        return oldest is not None and self.current - oldest > self.max_staleness

    async def wait_to_submit(self) -> None:
        """Wait until submitting stays within the staleness bound."""
        if not self.blocked():
            return
        cond = self._cond()
        async with cond:
            await cond.wait_for(lambda: not self.blocked())

    def enter(self, session_id: str, version: int | None) -> None:
        """A rollout started under ``version``."""
        self._inflight[session_id] = version

    def leave(self, session_id: str) -> None:
        """A rollout reached its terminal result."""
        self._inflight.pop(session_id, None)
        self._notify()

    def _notify(self) -> None:
        if self._changed is None:
            return
        cond = self._changed

        async def _wake() -> None:
            async with cond:
                cond.notify_all()

        try:
            task = asyncio.get_running_loop().create_task(_wake())
        except RuntimeError:  # no loop running: nobody can be waiting
            return
        self._wakers.add(task)  # a reference, so the task is not collected mid-flight
        task.add_done_callback(self._wakers.discard)
