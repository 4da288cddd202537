"""Training: the trainer interface, the core's loop for trainers it drives, and its parts.

Plugins write trainers against a role base (:class:`GroupConsumer`, :class:`PolicyTrainer`,
:class:`LoopDriver`, :class:`LaunchedBackend`; :mod:`rollhub.training.roles`), each a
:class:`Trainer` (all importable from here); the loop is
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
from rollhub.training.roles import (
    GroupConsumer,
    LaunchedBackend,
    LoopDriver,
    PolicyTrainer,
    TrainerRole,
    TrainerRoleError,
    role_of,
)
from rollhub.training.step import StepResult, TrainingBatch
from rollhub.training.trainer import DrivenRun, Trainer, TrainerOptions

__all__ = [
    "DrivenRun",
    "FitStats",
    "FittedRecord",
    "GroupConsumer",
    "LaunchedBackend",
    "LoopDriver",
    "PolicyTrainer",
    "StepResult",
    "Trainer",
    "TrainerOptions",
    "TrainerRole",
    "TrainerRoleError",
    "TrainingBatch",
    "fit_record",
    "fit_records",
    "group_advantages",
    "grpo_advantages",
    "grpo_mean_advantages",
    "rloo_advantages",
    "role_of",
]
