"""Backoff schedules: exponential growth, a cap, and full jitter.

Pure helpers, shared by submission retries and store polling, so the timing rules are
written (and tested) once. Full jitter spreads retries of many clients that failed at the
same moment, which is what throttled services need.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from typing import TypeVar

from rollhub.errors import SubmissionError

__all__ = ["Backoff", "is_transient", "poll_schedule"]

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class Backoff:
    """Delays ``initial * factor**attempt`` capped at ``maximum``, then jittered.

    :param initial: first delay in seconds.
    :param factor: growth per attempt.
    :param maximum: cap in seconds.
    :param jitter: fraction of the delay that is random: 0 gives a fixed schedule, 1 gives
        "full jitter" (uniform in ``[0, delay]``).
    """

    initial: float = 0.1
    factor: float = 2.0
    maximum: float = 10.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.initial < 0 or self.maximum < 0:
            raise ValueError("Backoff delays must be >= 0 seconds")
        if self.factor < 1:
            raise ValueError(f"Backoff factor={self.factor!r} must be >= 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"Backoff jitter={self.jitter!r} must be within [0, 1]")

    def base(self, attempt: int) -> float:
        """The delay before retry ``attempt`` (0-based) without jitter."""
        # min() before the power would overflow for large attempts.
        exp = min(attempt, 64)
        return min(self.maximum, self.initial * self.factor**exp)

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """The jittered delay before retry ``attempt``: within ``[(1-jitter)*base, base]``."""
        base = self.base(attempt)
        r = (rng or random).random()
        return base * (1.0 - self.jitter * r)


def is_transient(exc: BaseException) -> bool:
    """Whether a submission failure may succeed when retried."""
    if isinstance(exc, SubmissionError):
        return bool(getattr(exc, "transient", False))
    return isinstance(exc, ConnectionError | TimeoutError)


def poll_schedule(
    *, callbacks: bool, initial_s: float | None = None, max_s: float | None = None
) -> Backoff:
    """The store-poll schedule for one rollout.

    With callbacks the poll is only a safety net for a lost notice, so it starts late and
    stays sparse (a no-op rollout then costs a single store read); without them it starts
    fast and backs off.
    """
    if callbacks:
        return Backoff(initial=initial_s or 2.0, factor=2.0, maximum=max_s or 15.0, jitter=0.2)
    return Backoff(initial=initial_s or 0.05, factor=1.5, maximum=max_s or 5.0, jitter=0.3)
