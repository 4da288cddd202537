"""One training step's input and output: :class:`TrainingBatch` in, :class:`StepResult` out.

The training loop (:mod:`rollhub.training.loop`) builds the batch, a policy trainer's
:meth:`~rollhub.training.trainer.Trainer.step` returns the result, and the step recorder
writes both down.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeAlias

from rollhub.episode import Episode, EpisodeGroup

__all__ = ["Policy", "StepResult", "TrainingBatch"]

#: What a policy trainer hands the sampling side (a Tinker sampling client, parameter name
#: → tensor, a model module, a path). The core only passes it from the trainer to the
#: token source's sampling backend, which checks what it got; it never looks inside.
Policy: TypeAlias = object


@dataclass
class TrainingBatch:
    """One training step's input.

    :param step: the step index (0-based) this batch trains.
    :param groups: the groups of the step, in dataset order; each episode's ``trainable``
        flag says whether it may contribute (the failure policy has run).
    :param advantages: advantage per trainable episode id (estimator of
        ``[training] advantage``); episodes missing here contribute nothing.
    :param weight_version: the policy version being trained (it becomes ``+1``).
    """

    step: int
    groups: list[EpisodeGroup]
    advantages: dict[str, float]
    weight_version: int

    @property
    def episodes(self) -> list[Episode]:
        """Every episode of the batch, trainable or not."""
        return [e for g in self.groups for e in g.episodes]

    def trainable(self) -> list[tuple[Episode, float]]:
        """``(episode, advantage)`` for each episode that contributes a gradient."""
        return [
            (e, self.advantages[e.episode_id])
            for e in self.episodes
            if e.trainable and e.episode_id in self.advantages
        ]


@dataclass
class StepResult:
    """What one training step returns.

    :param weight_version: the version of the new weights (normally ``batch.weight_version
        + 1``); new turns are stamped with it.
    :param metrics: numbers for ``metrics.jsonl`` and the metric sinks (``loss`` is plotted).
    :param policy: what the sampling side swaps to (a Tinker sampling client, a path);
        None when the engine's weights were updated out of band (vLLM/SGLang weight sync):
        then only the version changes.
    """

    weight_version: int
    metrics: dict[str, float] = field(default_factory=dict)
    policy: Policy | None = None
