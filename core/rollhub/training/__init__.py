"""Training: the core's loop for trainers rollhub drives, advantages, checkpoints, sinks.

See :mod:`rollhub.training.loop` for one step end to end and ``docs/training.md`` for the
config.
"""

from rollhub.training.advantages import (
    group_advantages,
    grpo_advantages,
    grpo_mean_advantages,
    rloo_advantages,
)
from rollhub.training.loop import TrainingLoop, schedule

__all__ = [
    "TrainingLoop",
    "group_advantages",
    "grpo_advantages",
    "grpo_mean_advantages",
    "rloo_advantages",
    "schedule",
]
