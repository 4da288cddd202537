"""agentcore-rl-toolkit's ``run_rollout_with_bounds`` and its bounds, on rollhub's.

The bounds' parts are upstream's protocols (``PrioritySemaphore``, ``PriorityAssigner``,
``RateLimiter``); the ``Local*`` classes here implement them with rollhub's
:class:`~rollhub.sessions.bounds.PrioritySlots`, :class:`~rollhub.sessions.bounds.GroupPriority`
and :class:`~rollhub.submission.ratelimit.RateLimiter`. As upstream's, the container slot is held
from setup to teardown and the rollout slot for the run only, released in reverse order
on every exit. One difference: a teardown that fails is logged and kept in
``session_state["shutdown_error"]``; upstream raises it over the dump (or over the error
that ended the rollout).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol, runtime_checkable

from rollhub.compat.session_state import SessionState
from rollhub.compat.session_wire import RolloutDumpResponse
from rollhub.sessions.bounds import GroupPriority, PrioritySlots
from rollhub.submission.ratelimit import RateLimiter as _TokenBucket

__all__ = [
    "LocalPriorityAssigner",
    "LocalPrioritySemaphore",
    "LocalRateLimiter",
    "PriorityAssigner",
    "PrioritySemaphore",
    "RateLimiter",
    "RolloutSession",
    "RolloutSessionBounds",
    "run_rollout_with_bounds",
]

log = logging.getLogger(__name__)


@runtime_checkable
class RolloutSession(Protocol):
    """Upstream's session contract: ``setup``, ``run`` → dump, ``shutdown``; an async
    context manager whose exit shuts it down."""

    async def setup(self, task: dict[str, Any]) -> None: ...

    async def run(self, task: dict[str, Any]) -> RolloutDumpResponse: ...

    async def shutdown(self) -> None: ...

    async def __aenter__(self) -> object: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


@runtime_checkable
class PrioritySemaphore(Protocol):
    """A concurrency limit granting lower priorities first (upstream's interface)."""

    async def acquire(self, priority: int = 0) -> None: ...

    async def release(self) -> None: ...

    def slot(self, priority: int = 0) -> AbstractAsyncContextManager[None]: ...


@runtime_checkable
class PriorityAssigner(Protocol):
    """Per-key, arrival-order priorities (upstream's interface)."""

    async def get_priority(self, key: str) -> int: ...


@runtime_checkable
class RateLimiter(Protocol):
    """A request-rate limit that does the waiting (upstream's interface)."""

    async def wait_async(self) -> None: ...


class LocalPrioritySemaphore:
    """Lower priorities first, FIFO within one (upstream's ``PrioritySemaphore``)."""

    def __init__(self, value: int = 1) -> None:
        self._slots = PrioritySlots(value)

    async def acquire(self, priority: int = 0) -> None:
        await self._slots.acquire(priority)

    async def release(self) -> None:
        self._slots.release()

    @asynccontextmanager
    async def slot(self, priority: int = 0) -> AsyncIterator[None]:
        async with self._slots.slot(priority):
            yield

    @property
    def value(self) -> int:
        return self._slots.slots - self._slots.in_use


class LocalPriorityAssigner:
    """Arrival-order priority per key (upstream's ``PriorityAssigner``)."""

    def __init__(self) -> None:
        self._groups = GroupPriority()

    async def get_priority(self, key: str) -> int:
        return self._groups.of(key)


class LocalRateLimiter:
    """``tps_limit`` calls per second in this process (upstream's ``RateLimiter``)."""

    def __init__(self, tps_limit: float = 25) -> None:
        self.tps_limit = tps_limit
        self._bucket = _TokenBucket(tps_limit, burst=1.0)

    def wait_sync(self) -> None:
        self._bucket.acquire_sync()

    async def wait_async(self) -> None:
        await self._bucket.acquire()


@dataclass
class RolloutSessionBounds:
    """Everything that bounds rollout sessions, shared by every rollout of a run."""

    container_semaphore: PrioritySemaphore
    rollout_semaphore: PrioritySemaphore
    container_priority_assigner: PriorityAssigner
    rollout_priority_assigner: PriorityAssigner
    container_setup_timeout: float
    agent_run_timeout: float
    session_rate_limiter: RateLimiter | None = None


async def run_rollout_with_bounds(
    session_state: SessionState,
    bounds: RolloutSessionBounds,
    priority_key: str,
    session: RolloutSession,
    task: dict[str, Any],
) -> RolloutDumpResponse:
    """Set ``session`` up and run it under ``bounds``; timeouts raise ``TimeoutError``,
    a failed setup or run raises, a failed teardown after a run does not."""
    priority = await bounds.container_priority_assigner.get_priority(priority_key)
    async with bounds.container_semaphore.slot(priority):
        await session_state.update(
            {"container_priority": priority, "container_slot_start_at": dt.datetime.now()}
        )
        if bounds.session_rate_limiter is not None:
            async with _span("rate_limit_wait", session_state):
                await bounds.session_rate_limiter.wait_async()
        dump: RolloutDumpResponse | None = None
        try:
            async with _span("container_setup", session_state):
                try:
                    async with asyncio.timeout(bounds.container_setup_timeout):
                        await session.setup(task)
                except TimeoutError:
                    await session_state.set("container_setup_timeout_exceeded", 1.0)
                    raise
                await session_state.set("container_setup_timeout_exceeded", 0.0)
            await session_state.set("container_created_at", dt.datetime.now())
            rollout_priority = await bounds.rollout_priority_assigner.get_priority(priority_key)
            async with bounds.rollout_semaphore.slot(rollout_priority):
                await session_state.update(
                    {"rollout_priority": rollout_priority,
                     "rollout_slot_start_at": dt.datetime.now()}
                )  # fmt: skip
                async with _span("agent_run", session_state):
                    try:
                        async with asyncio.timeout(bounds.agent_run_timeout):
                            dump = await session.run(task)
                    except TimeoutError:
                        await session_state.set("agent_run_timeout_exceeded", 1.0)
                        raise
                    await session_state.set("agent_run_timeout_exceeded", 0.0)
        finally:
            await _shutdown(session, session_state)
        assert dump is not None
        return dump


async def _shutdown(session: RolloutSession, session_state: SessionState) -> None:
    """Shut down even when cancelled meanwhile; a failure is logged and recorded, never
    raised over the dump or over the error that ended the rollout."""
    task = asyncio.ensure_future(session.__aexit__(None, None, None))
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            cancelled = True
        except BaseException:
            break
    error = None if task.cancelled() else task.exception()
    if error is not None:
        log.warning("teardown of a rollout session failed: %r", error)
        try:
            await session_state.set("shutdown_error", f"{type(error).__name__}: {error}")
        except Exception:
            log.debug("could not record the teardown error", exc_info=True)
    if cancelled:
        raise asyncio.CancelledError


@asynccontextmanager
async def _span(name: str, state: SessionState) -> AsyncIterator[None]:
    start = dt.datetime.now()
    await state.set(f"{name}_start_at", start)
    try:
        yield
    finally:
        end = dt.datetime.now()
        await state.update({f"{name}_end_at": end, name: (end - start).total_seconds()})
