"""The thread pool sync handlers run in, and which of its threads are stuck.

Python cannot stop a thread, so a sync handler whose rollout was cancelled (or timed out)
keeps its thread until it returns. Such a thread is *stuck*: it counts against the pool
but serves nobody. When stuck threads fill the pool, no new sync handler can start;
:attr:`HandlerThreads.exhausted` says so, and the app reports it through ``/ping`` so that
the runtime replaces the process.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import logging
import threading
from collections.abc import Callable
from typing import TypeVar, TypeVarTuple

__all__ = ["HandlerThreads"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")
_Ts = TypeVarTuple("_Ts")


class HandlerThreads:
    """A lazily started pool of ``size`` threads that tracks stuck handlers.

    :param size: threads (each running sync handler holds one).
    :param on_change: called on the calling loop when the number of stuck threads changes.
    """

    def __init__(self, size: int, on_change: Callable[[], None] | None = None) -> None:
        self.size = size
        self._on_change = on_change
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._stuck: set[int] = set()
        self._next = 0

    async def run(self, func: Callable[[*_Ts], _T], *args: *_Ts) -> _T:
        """Run ``func(*args)`` in the pool (with the caller's context) and return its value.

        Cancelling the caller drops a call that has not started; one that has started
        keeps running and counts as stuck until it returns.
        """
        loop = asyncio.get_running_loop()
        ctx = contextvars.copy_context()
        with self._lock:
            self._next += 1
            call_id = self._next
        started = threading.Event()
        finished = threading.Event()

        def in_thread() -> _T:
            started.set()
            try:
                return ctx.run(func, *args)
            finally:
                finished.set()
                with self._lock:
                    was_stuck = call_id in self._stuck
                    self._stuck.discard(call_id)
                if was_stuck:
                    self._changed_threadsafe(loop)

        try:
            return await loop.run_in_executor(self._pool(), in_thread)
        except asyncio.CancelledError:
            with self._lock:
                stuck = 0
                if started.is_set() and not finished.is_set():
                    self._stuck.add(call_id)
                    stuck = len(self._stuck)
            if stuck:
                log.warning(
                    "a cancelled sync handler is still running; %d of %d handler threads "
                    "are stuck", stuck, self.size,
                )  # fmt: skip
                if self._on_change is not None:
                    self._on_change()
            raise

    @property
    def stuck(self) -> int:
        """Threads still running handlers of cancelled or timed-out rollouts."""
        with self._lock:
            return len(self._stuck)

    @property
    def exhausted(self) -> str | None:
        """Why no new sync handler can start (stuck threads fill the pool), else None."""
        if self.stuck >= self.size:
            return (
                f"all {self.size} handler threads are stuck in handlers of cancelled "
                f"rollouts; no new rollout can start"
            )
        return None

    def shutdown(self) -> None:
        """Stop taking work; running handlers finish on their own."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    def _changed_threadsafe(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._on_change is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._on_change)

    def _pool(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=self.size, thread_name_prefix="rollhub-handler"
            )
        return self._executor
