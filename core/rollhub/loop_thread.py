"""An event loop on a private thread, for the synchronous twins of async classes.

Sync methods hand their coroutine to this loop and wait; calling one from inside a running
event loop would deadlock a trainer's own loop, so it raises
:class:`~rollhub.errors.UsageError` instead.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, TypeVar

from rollhub.errors import UsageError

T = TypeVar("T")

__all__ = ["LoopThread", "ensure_no_running_loop"]


def ensure_no_running_loop(what: str = "this synchronous method") -> None:
    """Raise :class:`UsageError` when called from inside a running event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise UsageError(
        f"{what} was called inside a running event loop; use the async class "
        f"(e.g. AsyncHub, AsyncRolloutClient) and await it instead"
    )


class LoopThread:
    """Owns one event loop running forever on a daemon thread."""

    def __init__(self, name: str = "rollhub-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run a coroutine on the loop and wait for its result."""
        ensure_no_running_loop()
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Call a plain function on the loop thread (objects that bind to the loop)."""
        ensure_no_running_loop()

        async def _call() -> T:
            return fn(*args)

        return self.run(_call())

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """Schedule a plain function on the loop thread without waiting."""
        self.loop.call_soon_threadsafe(fn, *args)

    def iterate(self, agen: AsyncIterator[T]) -> Iterator[T]:
        """Drive an async iterator from sync code; closing the generator closes it too."""
        ensure_no_running_loop()
        try:
            while True:
                try:
                    yield self.run(agen.__anext__())  # type: ignore[arg-type]
                except StopAsyncIteration:
                    return
        finally:
            aclose = getattr(agen, "aclose", None)
            if aclose is not None and self.loop.is_running():
                asyncio.run_coroutine_threadsafe(aclose(), self.loop).result()

    def stop(self) -> None:
        """Stop the loop and join the thread."""
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)
        if not self.loop.is_running() and not self.loop.is_closed():
            self.loop.close()
