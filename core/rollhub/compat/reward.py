"""agentcore-rl-toolkit's ``RewardFunction``: the base class reward functions subclass.

rollhub has no reward-function protocol of its own (the handler returns ``rewards``, or a
``rollhub_collect_rewards`` hook computes them); this keeps upstream's contract so code
that subclasses it moves with its import changed.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod

__all__ = ["RewardFunction"]

log = logging.getLogger(__name__)


class RewardFunction(ABC):
    """A reward function: ``reward(**kwargs)`` returns a float or a list of floats
    (per-turn rewards, or one element for an outcome reward)."""

    @abstractmethod
    def __call__(self, **kwargs: object) -> float | list[float]:
        """Compute the reward from keyword context (response text, ground truth, ...)."""
