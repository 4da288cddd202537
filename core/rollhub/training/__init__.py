"""Training: the trainer interface, the core's loop for trainers it drives, and its parts.

Plugins write trainers against :class:`Trainer` (all importable from here); the loop is
:mod:`rollhub.training.loop` (one step end to end), with advantages, checkpoints, the step
recorder and metric sinks beside it; :mod:`rollhub.training.fitting` fits trace records
into training sequences for trainers that learn from token ids. ``docs/training.md`` has
the config.
"""

from rollhub.training.advantages import (
    group_advantages,
    grpo_advantages,
    grpo_mean_advantages,
    rloo_advantages,
)
from rollhub.training.fitting import FitStats, FittedRecord, fit_record, fit_records
from rollhub.training.step import StepResult, TrainingBatch
from rollhub.training.trainer import DrivenRun, Trainer, TrainerOptions

__all__ = [
    "DrivenRun",
    "FitStats",
    "FittedRecord",
    "StepResult",
    "Trainer",
    "TrainerOptions",
    "TrainingBatch",
    "fit_record",
    "fit_records",
    "group_advantages",
    "grpo_advantages",
    "grpo_mean_advantages",
    "rloo_advantages",
]
