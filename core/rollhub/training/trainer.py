"""The trainer interface: what a backend plugin does with finished episode groups.

:class:`Trainer` is the base every ``trainer`` component registers as. A trainer declares
its role by subclassing one of the role bases of :mod:`rollhub.training.roles`, and
:func:`~rollhub.training.roles.role_of` is the one place that reads it:

- a **consumer** (:class:`~rollhub.training.roles.GroupConsumer`, e.g. ``export``) takes
  each finished group through :meth:`Trainer.consume` during one pass over the dataset;
- a **policy trainer** (:class:`~rollhub.training.roles.PolicyTrainer`, e.g. ``torch``,
  ``tinker``) is driven by the core's training loop (:mod:`rollhub.training.loop`): each
  step hands it a :class:`~rollhub.training.step.TrainingBatch` (groups with their
  advantages) and gets a :class:`~rollhub.training.step.StepResult` back: the new weight
  version, the step's metrics, and the new policy for the sampling side (e.g. a Tinker
  sampling client), which the hub passes to the token source's sampling backend between
  turns;
- a **loop driver** (:class:`~rollhub.training.roles.LoopDriver`, e.g. ``trl``) runs its
  own loop: ``rollhub run`` starts the hub and hands the trainer a :class:`DrivenRun` (the
  started hub, the dataset, a step recorder); the trainer's loop asks the hub for episode
  groups and records each step, and :meth:`Trainer.drive` returns when training is done;
- a **launched backend** (:class:`~rollhub.training.roles.LaunchedBackend`, e.g. ``verl``,
  ``slime``) is trained by a backend started with its own command; the component selects
  the backend (its launch settings are its plugin's ``[plugins.<name>]`` table) and
  ``rollhub run`` refuses it.

The methods of every role stay on :class:`Trainer` (raising when a trainer lacks its role),
so trainers written before the role bases, which subclass :class:`Trainer` directly and
set ``trains = True`` or ``drives = True``, keep working.

Constructor contract: ``cls(options, *, context=...)`` with the validated ``Options`` and
a :class:`~rollhub.registry.ComponentContext` (``context.run_dir`` is where outputs go,
``context.exp_id`` the experiment). The older keywords ``run_dir=`` and ``exp_id=`` still
work; extra keywords are accepted and ignored.
"""

from __future__ import annotations

from abc import ABC
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict

from rollhub.episode import EpisodeGroup
from rollhub.registry import ComponentContext
from rollhub.training.step import Policy, StepResult, TrainingBatch

if TYPE_CHECKING:
    from rollhub.hubs.view import HubView
    from rollhub.training.recorder import StepRecorder

__all__ = ["DrivenRun", "Trainer", "TrainerOptions"]


class TrainerOptions(BaseModel):
    """Options every trainer accepts; trainers subclass this for their own."""

    model_config = ConfigDict(extra="forbid")


@dataclass
class DrivenRun:
    """What ``rollhub run`` hands a trainer that drives its own loop.

    :param hub: the started hub; its loop is the one :meth:`Trainer.drive` is awaited on
        (a trainer whose loop runs on another thread submits to it with
        ``asyncio.run_coroutine_threadsafe``).
    :param payloads: the dataset (``experiment.dataset``, ``max_prompts`` applied).
    :param recorder: records each step (``metrics.jsonl``, ``episodes.jsonl``, the metric
        sinks, the progress bar); ``recorder.total_steps`` is how many steps to train.
    :param run_dir: the run directory (the trainer's own outputs go here).
    :param resume: ``rollhub run --resume``: continue from the run directory's state.
    """

    hub: HubView
    payloads: list[dict[str, Any]]
    recorder: StepRecorder
    run_dir: Path
    resume: bool = False


class Trainer(ABC):
    """The base of every trainer component. Subclasses set ``name`` and ``Options``, and
    declare their role by subclassing a role base of :mod:`rollhub.training.roles`."""

    name: ClassVar[str]
    Options: ClassVar[type[TrainerOptions]] = TrainerOptions
    #: deprecated: subclass :class:`~rollhub.training.roles.PolicyTrainer` instead (it sets
    #: this True); still read by :func:`~rollhub.training.roles.role_of` on a trainer that
    #: subclasses Trainer directly
    trains: ClassVar[bool] = False
    #: deprecated: subclass :class:`~rollhub.training.roles.LoopDriver` instead (it sets this
    #: True); read like :attr:`trains`
    drives: ClassVar[bool] = False
    #: why this trainer cannot take a run with several ``[[policies]]`` (refused by
    #: ``rollhub config check`` with this reason); None: it can (a trainer that trains is
    #: then built once per trainable policy, a consumer sees every policy's records)
    policies_refusal: ClassVar[str | None] = None

    def __init__(
        self,
        options: TrainerOptions | None = None,
        *,
        context: ComponentContext | None = None,
        run_dir: Path | None = None,
        exp_id: str | None = None,
        **_: object,
    ) -> None:
        self.options = options or self.Options()
        if context is None:
            context = ComponentContext(run_dir=run_dir, exp_id=exp_id or "rollhub")
        #: what the core told this trainer (run directory, experiment id, config)
        self.context = context
        self.run_dir = run_dir if run_dir is not None else context.run_dir
        self.exp_id = exp_id or context.exp_id

    async def start(self) -> None:  # noqa: B027 - optional lifecycle step
        """Prepare outputs or connect to the training service."""

    async def consume(self, group: EpisodeGroup) -> dict[str, Any] | None:
        """Take one finished group (consumers); return metrics (or None)."""
        raise NotImplementedError(f"trainer {self.name!r} does not consume groups")

    # Policy trainers (PolicyTrainer) ------------------------------------------------------

    async def initial_policy(self) -> Policy | None:
        """The policy the sampling side starts from (None: the engine's own weights).

        Called once after :meth:`start` (and after :meth:`load_state` on resume).
        """
        return None

    async def step(self, batch: TrainingBatch) -> StepResult:
        """Train on one batch; return the new version, metrics and policy."""
        raise NotImplementedError(f"trainer {self.name!r} does not train (not a PolicyTrainer)")

    # Loop drivers (LoopDriver) ------------------------------------------------------------

    async def drive(self, run: DrivenRun) -> dict[str, Any]:
        """Run the trainer's own loop over ``run.payloads`` until done.

        :returns: ``{"steps", "total_steps", "weight_version", "last"}`` (``last``: the last
            step's metrics), as the core's loop reports them.
        """
        raise NotImplementedError(f"trainer {self.name!r} does not drive (not a LoopDriver)")

    async def save_state(self, directory: Path) -> dict[str, Any]:
        """Save what resuming needs under ``directory``; return JSON-ready state."""
        return {}

    async def load_state(self, directory: Path, state: dict[str, Any]) -> None:  # noqa: B027
        """Restore what :meth:`save_state` wrote (weights, optimizer)."""

    async def drop_state(self, state: dict[str, Any]) -> None:  # noqa: B027
        """A checkpoint whose :meth:`save_state` returned ``state`` was deleted
        (``training.keep_checkpoints``): free what ``state`` names outside the checkpoint's
        directory, e.g. weights a training service stores. The directory is already gone;
        an exception is logged and the run goes on. The default does nothing."""

    async def close(self) -> dict[str, Any]:
        """Flush outputs; return what was written or trained (paths, step counts)."""
        return {}
