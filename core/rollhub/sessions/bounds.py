"""The shared limits sessions run under: priority slots, a creation rate, timeouts.

One :class:`SessionBounds` is built per hub and shared by every session, which is what
makes its slots cap anything. Priorities are small integers handed out per group in
arrival order (:class:`GroupPriority`): lower goes first, so the samples of an earlier
group get slots before those of a later one, and a step's groups finish in order.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from rollhub.sessions.config import SessionsConfig
from rollhub.submission.ratelimit import RateLimiter

__all__ = ["GroupPriority", "PrioritySlots", "SessionBounds"]


class PrioritySlots:
    """An asyncio semaphore that wakes the lowest priority first, FIFO within one.

    A newcomer never overtakes queued waiters, and a waiter cancelled after being handed a
    slot gives it back, so no slot leaks on any exit path.
    """

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"slots={slots!r} must be at least 1")
        self.slots = slots
        self._free = slots
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    @property
    def in_use(self) -> int:
        """Slots held right now."""
        return self.slots - self._free

    async def acquire(self, priority: int = 0) -> None:
        """Wait for a slot (lower ``priority`` first)."""
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (priority, next(self._order), future))
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release()  # handed a slot just as we were cancelled: pass it on
            else:
                future.cancel()
            raise

    def release(self) -> None:
        """Give a slot back to the next live waiter, or to the pool."""
        while self._waiters:
            _, _, future = heapq.heappop(self._waiters)
            if not future.done():
                future.set_result(None)
                return
        self._free += 1

    @asynccontextmanager
    async def slot(self, priority: int = 0) -> AsyncIterator[None]:
        """Hold one slot for the block."""
        await self.acquire(priority)
        try:
            yield
        finally:
            self.release()


class GroupPriority:
    """Arrival-order priorities per group id: the first group seen is 0, the next 1, ..."""

    def __init__(self) -> None:
        self._next = 0
        self._seen: dict[str, int] = {}

    def of(self, group_id: str) -> int:
        """The group's priority, assigned on first sight."""
        priority = self._seen.get(group_id)
        if priority is None:
            priority = self._seen[group_id] = self._next
            self._next += 1
        return priority

    def forget(self, group_id: str) -> None:
        """Drop a finished group (its id may come back in a later step, behind the rest)."""
        self._seen.pop(group_id, None)


@dataclass
class SessionBounds:
    """Everything that bounds sessions: two slot pools, a rate, three timeouts."""

    setup_slots: PrioritySlots
    run_slots: PrioritySlots
    setup_timeout_s: float
    run_timeout_s: float
    shutdown_timeout_s: float
    rate: RateLimiter | None = None
    #: how often a session queued for a run slot tells its runtime it is still there
    #: (:meth:`RolloutSession.keepalive`): an A2A server evicts a parked task left untouched
    #: (``[sessions] keepalive_s``)
    keepalive_s: float = 60.0

    @classmethod
    def from_config(
        cls, config: SessionsConfig, *, concurrency: int, timeout_s: float
    ) -> SessionBounds:
        """Bounds from ``[sessions]``, defaulting to ``[experiment]``'s concurrency and
        timeout."""
        setup = config.setup_slots or concurrency
        return cls(
            setup_slots=PrioritySlots(setup),
            run_slots=PrioritySlots(min(config.run_slots or setup, setup)),
            setup_timeout_s=config.setup_timeout_s,
            run_timeout_s=config.run_timeout_s or timeout_s,
            shutdown_timeout_s=config.shutdown_timeout_s,
            rate=RateLimiter(config.sessions_per_s, burst=1.0) if config.sessions_per_s else None,
            keepalive_s=config.keepalive_s,
        )
