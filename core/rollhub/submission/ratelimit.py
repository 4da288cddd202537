"""Token-bucket rate limiting shared by everything that calls one remote service.

AWS Bedrock AgentCore Runtime allows a fixed number of ``InvokeAgentRuntime`` (and stop)
calls per second per runtime; every client of one runtime ARN in this process must share
one bucket, whatever the calling thread or event loop. :func:`limiter_for` returns that
shared bucket by key.

A waiter that is cancelled gives its token back, so abandoned calls leave no debt. A
caller can pass a :class:`QueueTicket` down (:func:`queue_ticket`) to learn whether its
call is still queued in a limiter, that is, was never sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from contextvars import ContextVar

__all__ = ["QueueTicket", "RateLimiter", "limiter_for", "queue_ticket"]


class QueueTicket:
    """Whether one call is held in a limiter's queue (so it has not been sent).

    ``queued`` is True while the call waits for its token, and stays True when that wait
    is cancelled: such a call never went out.
    """

    __slots__ = ("queued",)

    def __init__(self) -> None:
        self.queued = False


_TICKET: ContextVar[QueueTicket | None] = ContextVar("rollhub_queue_ticket", default=None)


@contextlib.contextmanager
def queue_ticket(ticket: QueueTicket) -> Iterator[QueueTicket]:
    """Let the limiters awaited in this context report on ``ticket``."""
    token = _TICKET.set(ticket)
    try:
        yield ticket
    finally:
        _TICKET.reset(token)


class RateLimiter:
    """A thread-safe token bucket usable from sync and async code.

    :param rate: tokens added per second.
    :param burst: bucket size (default: ``max(1, rate)``).
    """

    def __init__(self, rate: float, burst: float | None = None) -> None:
        if rate <= 0:
            raise ValueError(f"rate={rate!r} must be > 0 calls per second")
        self.rate = float(rate)
        self.burst = float(burst if burst is not None else max(1.0, rate))
        self._tokens = self.burst
        self._stamp = time.monotonic()
        self._lock = threading.Lock()

    def _reserve(self) -> float:
        """Take one token (possibly going negative) and return how long to wait for it."""
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
            self._stamp = now
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self.rate

    def _give_back(self) -> None:
        """Return the token of a call that will not be made."""
        with self._lock:
            self._tokens = min(self.burst, self._tokens + 1.0)

    async def acquire(self) -> None:
        """Wait (without blocking the loop) until a call is allowed.

        Cancelled while waiting, it gives its token back: the call is not made, and a
        thousand abandoned waiters must not delay the next real call by their share.
        """
        wait = self._reserve()
        if wait <= 0:
            return
        ticket = _TICKET.get()
        if ticket is not None:
            ticket.queued = True
        try:
            await asyncio.sleep(wait)
        except BaseException:
            self._give_back()
            raise  # the ticket stays queued: this call was never sent
        if ticket is not None:
            ticket.queued = False

    def acquire_sync(self) -> None:
        """Block the calling thread until a call is allowed."""
        wait = self._reserve()
        if wait > 0:
            try:
                time.sleep(wait)
            except BaseException:  # KeyboardInterrupt: the call is not made
                self._give_back()
                raise


_SHARED: dict[str, RateLimiter] = {}
_SHARED_LOCK = threading.Lock()


def limiter_for(key: str, rate: float, burst: float | None = None) -> RateLimiter:
    """The process-wide limiter for ``key`` (e.g. a runtime ARN), created on first use.

    Later calls with the same key return the same limiter; their ``rate`` is ignored.
    """
    with _SHARED_LOCK:
        lim = _SHARED.get(key)
        if lim is None:
            lim = _SHARED[key] = RateLimiter(rate, burst)
        return lim
