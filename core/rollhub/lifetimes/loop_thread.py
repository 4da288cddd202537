"""An event loop on a private thread: for the synchronous twins of async classes, for
servers that sync callers reach from other threads, and for work kept off a server's loop.

Sync methods hand their coroutine to this loop and wait; calling one from inside a running
event loop would deadlock a trainer's own loop, so it raises
:class:`~rollhub.errors.UsageError` instead. Code on another event loop awaits the loop's
work through :meth:`LoopThread.run_async`.

The thread starts on first use (or :meth:`LoopThread.start`) and ends with
:meth:`LoopThread.stop`, or :meth:`LoopThread.stop_async` from another event loop; a later
use starts a fresh one. Stopping ends the loop where it stands: tasks still pending on it
are neither cancelled nor awaited (an owner that must settle its work does so before it
stops the loop), and the loop is closed once its thread has ended. The thread is a daemon,
so nothing runs at interpreter exit; a forked child inherits the object but not the
thread.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, TypeVar, TypeVarTuple

from rollhub.errors import UsageError

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

__all__ = ["DEFAULT_JOIN_TIMEOUT_S", "LoopThread", "ensure_no_running_loop"]

log = logging.getLogger(__name__)

#: what a refused sync call points at, unless its owner names its own async API
DEFAULT_HINT = "use the async class (e.g. AsyncHub, AsyncRolloutClient) and await it instead"

#: how long a stop waits for the thread to end, unless its owner says otherwise
DEFAULT_JOIN_TIMEOUT_S = 10.0


def ensure_no_running_loop(what: str = "this synchronous method", hint: str = DEFAULT_HINT) -> None:
    """Raise :class:`UsageError` when called from inside a running event loop.

    :param hint: the fix the message names (the owner's async API).
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise UsageError(f"{what} was called inside a running event loop; {hint}")


class LoopThread:
    """Owns one event loop running forever on a daemon thread.

    Safe to share between threads: any thread may hand it work, and the first one starts it.

    :param name: the thread's name.
    :param hint: what a sync call made inside a running event loop is told to use instead.
    """

    def __init__(self, name: str = "rollhub-loop", *, hint: str = DEFAULT_HINT) -> None:
        self.name = name
        self.hint = hint
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> asyncio.AbstractEventLoop:
        """Start the thread unless its loop runs; returns the loop once it runs."""
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                ready = threading.Event()
                thread = threading.Thread(
                    target=_serve, args=(loop, ready), name=self.name, daemon=True
                )
                thread.start()
                # From here on `running` holds until a stop, so a stop never meets a loop
                # that has yet to start (and would then run forever, unstopped).
                ready.wait()
                self._loop, self._thread = loop, thread
            return self._loop

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The running loop (started now if it is not)."""
        return self.start()

    @property
    def running(self) -> bool:
        """Whether the thread is started and its loop runs."""
        loop = self._loop
        return loop is not None and loop.is_running()

    def run(
        self, coro: Coroutine[Any, Any, T], timeout: float | None = None, *, what: str | None = None
    ) -> T:
        """Run a coroutine on the loop and wait for its result.

        :param what: the caller named in the :class:`UsageError` of a call made inside a
            running event loop (the coroutine is closed unrun then).
        """
        try:
            ensure_no_running_loop(what or "this synchronous method", self.hint)
        except UsageError:
            coro.close()
            raise
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def run_async(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await a coroutine on this loop from any event loop (directly when on it already).

        Cancelling the awaiting task cancels the coroutine on this loop.
        """
        loop = self.loop
        try:
            current = asyncio.get_running_loop()
        except RuntimeError:
            current = None
        if current is loop:
            return await coro
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))

    def call(self, fn: Callable[[*Ts], T], *args: *Ts) -> T:
        """Call a plain function on the loop thread (objects that bind to the loop)."""
        ensure_no_running_loop(hint=self.hint)

        async def _call() -> T:
            return fn(*args)

        return self.run(_call())

    def call_soon(self, fn: Callable[[*Ts], object], *args: *Ts) -> None:
        """Schedule a plain function on the loop thread without waiting."""
        self.loop.call_soon_threadsafe(fn, *args)

    def iterate(self, agen: AsyncIterator[T]) -> Iterator[T]:
        """Drive an async iterator from sync code; closing the generator closes it too."""
        ensure_no_running_loop(hint=self.hint)
        try:
            while True:
                try:
                    yield self.run(_anext(agen))
                except StopAsyncIteration:
                    return
        finally:
            aclose = getattr(agen, "aclose", None)
            if aclose is not None and self.running:
                asyncio.run_coroutine_threadsafe(aclose(), self.loop).result()

    def stop(self, join_timeout: float = DEFAULT_JOIN_TIMEOUT_S) -> bool:
        """Stop the loop, wait for the thread and close the loop (idempotent).

        Tasks still pending on the loop are dropped with it, neither cancelled nor awaited.

        :param join_timeout: seconds to wait for the thread to end.
        :returns: False when the thread outlived ``join_timeout`` (a callback blocks its
            loop); that loop is left open, to end with the process, and a warning is logged.
        """
        detached = self._detach()
        if detached is None:
            return True
        loop, thread = detached
        thread.join(join_timeout)
        return self._close(loop, join_timeout)

    async def stop_async(self, join_timeout: float = DEFAULT_JOIN_TIMEOUT_S) -> bool:
        """:meth:`stop` for code on another event loop, which the join does not block."""
        detached = self._detach()
        if detached is None:
            return True
        loop, thread = detached
        await asyncio.to_thread(thread.join, join_timeout)
        return self._close(loop, join_timeout)

    def _detach(self) -> tuple[asyncio.AbstractEventLoop, threading.Thread] | None:
        """Forget the loop and ask it to stop; a use from now on starts a fresh one."""
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None or thread is None:
            return None
        if not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)
        return loop, thread

    def _close(self, loop: asyncio.AbstractEventLoop, join_timeout: float) -> bool:
        if loop.is_running():
            log.warning(
                "event loop thread %r did not stop within %.1fs; leaving it to the process",
                self.name,
                join_timeout,
            )
            return False
        if not loop.is_closed():
            loop.close()
        return True


def _serve(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
    """The thread's body: run ``loop`` as this thread's event loop until it is stopped."""
    asyncio.set_event_loop(loop)
    loop.call_soon(ready.set)
    loop.run_forever()


async def _anext(agen: AsyncIterator[T]) -> T:
    """The next item of ``agen``, as a coroutine (``__anext__`` gives an awaitable)."""
    return await agen.__anext__()
