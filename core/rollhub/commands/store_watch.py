"""A watch on the result store during ``rollhub run``: a store that stops answering says so.

Results reach the client only through the store, so a store that hangs (an S3 endpoint
stopped, a network mount gone) stalls the whole run while every rollout looks busy. The
watch probes the store with one small read (``exists`` of a key no rollout uses) at a
time; when no probe has succeeded for ``stall_s`` seconds while rollouts are in flight, it
logs one warning per stall and shows the stall in the progress line until the store
answers again. Agents that are merely slow never trigger it: the probe does not wait for
them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

from rollhub.errors import UsageError
from rollhub.stores.base import ResultStore

log = logging.getLogger(__name__)

__all__ = ["StoreWatch"]

_T = TypeVar("_T")

#: the key probed: a store key no rollout can write (ids never start with a dot)
PROBE_KEY = ".rollhub-store-probe"


class StoreWatch:
    """Probes a store while rollouts are in flight.

    :param store: the result store (``exists(key)`` is what is probed).
    :param running: how many rollouts are in flight now.
    :param show: called with a short text for the progress line ("" when all is well).
    :param stall_s: seconds without a successful probe, rollouts in flight, that make a
        stall.
    """

    def __init__(
        self, store: ResultStore | None, running: Callable[[], int], show: Callable[[str], None], *, stall_s: float
    ) -> None:
        self.store = store
        self.running = running
        self.show = show
        self.stall_s = stall_s
        self.last_ok = time.monotonic()
        self.last_error: str | None = None
        self.stalled = False
        #: stalls seen in this run
        self.stalls = 0
        self._probe: asyncio.Future[bool] | None = None

    def _start_probe(self) -> None:
        if self._probe is not None and not self._probe.done():
            return  # one probe at a time: a hung store holds one thread, not many
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()

        def probe() -> None:
            try:
                if self.store is None:
                    raise UsageError("StoreWatch.store is not set; set it before watching")
                result = self.store.exists(PROBE_KEY)
            except Exception as exc:
                loop.call_soon_threadsafe(_fail, fut, exc)
            else:
                loop.call_soon_threadsafe(_settle, fut, result)

        # a daemon thread, not the loop's executor: a store hung for good must not keep
        # the run from exiting once its rollouts have ended
        threading.Thread(target=probe, name="rollhub-store-probe", daemon=True).start()
        fut.add_done_callback(self._probed)
        self._probe = fut

    def _probed(self, fut: asyncio.Future[bool]) -> None:
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is None:
            self.last_ok = time.monotonic()
            self.last_error = None
        else:
            self.last_error = f"{type(exc).__name__}: {exc}"

    def check(self, now: float | None = None) -> None:
        """One look: warn when a stall begins, clear the note when it ends."""
        now = time.monotonic() if now is None else now
        idle = now - self.last_ok
        if idle >= self.stall_s and self.running() > 0:
            if not self.stalled:
                self.stalled = True
                self.stalls += 1
                why = f"; last error: {self.last_error}" if self.last_error else ""
                log.warning(
                    "no result-store operation has completed for %.0f s while %d rollouts "
                    "are in flight (store %s)%s; is the store reachable?",
                    idle,
                    self.running(),
                    getattr(self.store, "url", "?"),
                    why,
                )
            self.show(f"store stalled {idle:.0f}s")
        elif self.stalled and idle < self.stall_s:
            self.stalled = False
            log.warning("the result store answers again")
            self.show("")

    @contextlib.asynccontextmanager
    async def watching(self, interval_s: float | None = None) -> AsyncIterator[StoreWatch]:
        """Probe and check every ``interval_s`` (default: a quarter of ``stall_s``)."""
        interval = interval_s if interval_s is not None else max(self.stall_s / 4, 0.05)
        self.last_ok = time.monotonic()

        async def loop() -> None:
            while True:
                self._start_probe()
                await asyncio.sleep(interval)
                self.check()

        task = asyncio.get_running_loop().create_task(loop())
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _settle(fut: asyncio.Future[_T], result: _T) -> None:
    if not fut.done():  # the loop may have moved on
        fut.set_result(result)


def _fail(fut: asyncio.Future[_T], exc: BaseException) -> None:
    if not fut.done():  # the loop may have moved on
        fut.set_exception(exc)
