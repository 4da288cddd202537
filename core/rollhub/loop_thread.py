"""An event loop on a private thread, for the synchronous twins of async classes.

Sync methods hand their coroutine to this loop and wait; calling one from inside a running
event loop would deadlock a trainer's own loop, so it raises
:class:`~rollhub.errors.UsageError` instead. Code on another event loop awaits the loop's
work through :meth:`LoopThread.run_async`.

The thread starts on first use and ends with :meth:`LoopThread.stop`; a later use starts
a fresh one.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, TypeVar, TypeVarTuple

from rollhub.errors import UsageError

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

__all__ = ["LoopThread", "ensure_no_running_loop"]

#: what a refused sync call points at, unless its owner names its own async API
DEFAULT_HINT = "use the async class (e.g. AsyncHub, AsyncRolloutClient) and await it instead"


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

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The running loop (started now if it is not)."""
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name=self.name, daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

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

    def stop(self) -> None:
        """Stop the loop and join the thread (idempotent)."""
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None or thread is None:
            return
        if loop.is_running():
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)
        if not loop.is_running() and not loop.is_closed():
            loop.close()


async def _anext(agen: AsyncIterator[T]) -> T:
    """The next item of ``agen``, as a coroutine (``__anext__`` gives an awaitable)."""
    return await agen.__anext__()
