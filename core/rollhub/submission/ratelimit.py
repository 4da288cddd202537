"""Token-bucket rate limiting shared by everything that calls one remote service.

AWS Bedrock AgentCore Runtime allows a fixed number of ``InvokeAgentRuntime`` (and stop)
calls per second per runtime; every client of one runtime ARN in this process must share
one bucket, whatever the calling thread or event loop. :func:`limiter_for` returns that
shared bucket by key.
"""

from __future__ import annotations

import asyncio
import threading
import time

__all__ = ["RateLimiter", "limiter_for"]


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

    async def acquire(self) -> None:
        """Wait (without blocking the loop) until a call is allowed."""
        wait = self._reserve()
        if wait > 0:
            await asyncio.sleep(wait)

    def acquire_sync(self) -> None:
        """Block the calling thread until a call is allowed."""
        wait = self._reserve()
        if wait > 0:
            time.sleep(wait)


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
