"""The pieces :mod:`rollhub.submission.session_watch` is built from: the signals a rollout
waits for, the internal exceptions that carry how its submission or wait ended, the
cleanup of its bookkeeping and the timing constants."""

from __future__ import annotations

import logging
from collections.abc import Coroutine
from typing import Any, Literal

from rollhub.episode import Status
from rollhub.submission.retry import Backoff

__all__ = [
    "ERROR_STATUS",
    "SESSION_BACKOFF",
    "STOP_WAIT_S",
    "Lost",
    "NotTaken",
    "Resolved",
    "Signal",
    "StoreFailed",
    "best_effort",
]

log = logging.getLogger("rollhub.submission.session_watch")

#: what ends a rollout's wait: the app's completion notice, or the runtime losing the session
Signal = tuple[Literal["notice"], dict[str, Any]] | tuple[Literal["lost"], str]


class Lost(Exception):
    """The runtime reported the session gone and no result is in the store."""


class NotTaken(Exception):
    """No worker took the submission after every transient retry."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__(str(exc))
        self.exc = exc


class Resolved(Exception):
    """The rollout's outcome is already set (a permanent submission error)."""


class StoreFailed(Exception):
    """No result can be had from the store: the app could not store it, or the store
    stayed unreadable until the rollout's deadline."""


#: delays before a rollout's next session: short, the runtime has live workers already
SESSION_BACKOFF = Backoff(initial=0.1, factor=2.0, maximum=2.0)
#: how long a rollout past its deadline waits for its session to stop
STOP_WAIT_S = 3.0
#: stored error types that are not the agent's failure
ERROR_STATUS: dict[str, Status] = {"CancelledError": "cancelled", "RolloutTimeout": "timeout"}


async def best_effort(coro: Coroutine[Any, Any, None]) -> None:
    """Await ``coro``; its failure is logged, never raised (session stops and releases)."""
    try:
        await coro
    except Exception as exc:
        log.debug("best-effort runtime call failed: %s", exc)
