"""Trainer roles: what a trainer does with the hub, declared by its base class.

A trainer plugin subclasses one role base (each a :class:`~rollhub.training.Trainer`, so the
registry takes it as before):

- :class:`GroupConsumer` takes each finished group through ``consume(group)`` during one pass
  over the dataset (``export``, ``rllm``).
- :class:`PolicyTrainer` learns, in this process (``torch``) or on a remote service
  (``tinker``): the core's training loop hands it ``step(batch)`` and gets a
  :class:`~rollhub.training.step.StepResult` back.
- :class:`LoopDriver` runs its own training loop against the started hub:
  ``rollhub run`` awaits ``drive(run)`` (``trl``).
- :class:`LaunchedBackend` is trained by a backend launched by its own command, whose
  workers ask hubs for episodes (``verl``, ``slime``); the component selects the backend,
  whose launch settings live in its plugin's ``[plugins.<name>]`` table
  (:mod:`rollhub.training.launch_settings`), and ``rollhub run`` refuses it with its
  ``launch_hint``.

:func:`role_of` is the one place that tells the roles apart; every caller dispatches on the
:class:`TrainerRole` it returns. A trainer written before the role bases (a direct
:class:`~rollhub.training.Trainer` subclass with ``trains = True``, ``drives = True``, or
its own ``consume``) is still classified, with a :class:`DeprecationWarning` naming the
base to subclass.
"""

from __future__ import annotations

import enum
import warnings
import weakref
from abc import abstractmethod
from pathlib import Path
from typing import Any, ClassVar

from rollhub.episode import Episode, EpisodeGroup
from rollhub.errors import PluginError, UsageError
from rollhub.training.step import StepResult, TrainingBatch
from rollhub.training.trainer import DrivenRun, Trainer

__all__ = [
    "GroupConsumer",
    "LaunchedBackend",
    "LoopDriver",
    "PolicyTrainer",
    "TrainerRole",
    "TrainerRoleError",
    "role_of",
]


class TrainerRoleError(PluginError, TypeError):
    """A trainer class declares no role, or several. Context: ``trainer`` (the class's
    qualified name)."""

    trainer: str


class TrainerRole(enum.Enum):
    """What ``rollhub run`` and the training loop do with a trainer."""

    #: one pass over the dataset, each finished group to ``consume``
    CONSUMER = "consumer"
    #: the core's training loop calls ``step`` (and ``initial_policy``)
    POLICY_TRAINER = "policy trainer"
    #: ``rollhub run`` awaits ``drive`` with the started hub
    LOOP_DRIVER = "loop driver"
    #: a backend launched by its own command; ``rollhub run`` refuses it
    LAUNCHED_BACKEND = "launched backend"


class GroupConsumer(Trainer):
    """Consumes finished episode groups, one pass over the dataset (e.g. ``export``)."""

    @abstractmethod
    async def consume(self, group: EpisodeGroup) -> dict[str, Any] | None:
        """Take one finished group; return metrics (or None)."""


class PolicyTrainer(Trainer):
    """Learns from training batches, in process or on a remote service (e.g. ``torch``,
    ``tinker``); the core's training loop drives it (:mod:`rollhub.training.loop`)."""

    # what readers of the older flag see (role_of reads the base class, not the flag)
    trains = True

    @abstractmethod
    async def step(self, batch: TrainingBatch) -> StepResult:
        """Train on one batch; return the new version, metrics and policy."""

    async def prepare(self, episode: Episode, step: int) -> None:
        """An episode of step ``step``, handed over as soon as it finishes, before its group
        is scored and before :meth:`step` gets the whole batch. A trainer may start work
        on it here that depends neither on the advantages nor on the weights the step
        trains, and must return at once (the work goes on in the background; the torch
        trainer forwards its frozen layers). It is advisory: an exception is logged and
        the episode still reaches its group and the step. The default does nothing."""


class LoopDriver(Trainer):
    """Runs its own training loop against the started hub (e.g. ``trl``)."""

    # what readers of the older flag see (role_of reads the base class, not the flag)
    drives = True

    def resume_step(self, run_dir: Path) -> int | None:
        """The step a resumed run of this loop continues from (the steps its newest
        checkpoint holds), when the loop knows it before it starts: the rows of later
        steps are then dropped from ``metrics.jsonl`` and ``episodes.jsonl``, since those
        steps run again. None (the default): it continues after the last recorded step."""
        return None

    @abstractmethod
    async def drive(self, run: DrivenRun) -> dict[str, Any]:
        """Run the loop over ``run.payloads`` until done.

        :returns: ``{"steps", "total_steps", "weight_version", "last"}`` (``last``: the last
            step's metrics), as the core's loop reports them.
        """


class LaunchedBackend(Trainer):
    """Selects a backend launched by its own command (e.g. ``verl``, ``slime``).

    The backend's own loop asks hubs for episodes; nothing hands this component groups or
    batches, and ``rollhub run`` refuses it with :attr:`launch_hint`. How the backend is
    launched is its plugin's ``[plugins.<name>]`` table, read with
    :func:`~rollhub.training.launch_settings.launch_settings`.
    """

    #: how to launch the backend instead of ``rollhub run`` (the whole refusal message)
    launch_hint: ClassVar[str]

    async def consume(self, group: EpisodeGroup) -> dict[str, Any] | None:
        """Not used: the backend's loop asks the hub for episodes.

        :raises UsageError: always, with :attr:`launch_hint`.
        """
        raise UsageError(self.launch_hint)


#: the role bases, in the order a class is checked against them
_BASES: dict[type[Trainer], TrainerRole] = {
    GroupConsumer: TrainerRole.CONSUMER,
    PolicyTrainer: TrainerRole.POLICY_TRAINER,
    LoopDriver: TrainerRole.LOOP_DRIVER,
    LaunchedBackend: TrainerRole.LAUNCHED_BACKEND,
}
#: the role base each role is declared by (what the errors and warnings name)
_BASE_OF = {role: base for base, role in _BASES.items()}
#: classes already warned about their older flags (once per class, not per call)
_warned: weakref.WeakSet[type] = weakref.WeakSet()


def role_of(trainer_cls: type) -> TrainerRole:
    """The role of a trainer class, by the role base it subclasses.

    A direct :class:`~rollhub.training.Trainer` subclass written before the role bases is
    classified as it was (``drives = True``: a loop driver; else ``trains = True``: a policy
    trainer; else, with its own ``consume``: a consumer), with one
    :class:`DeprecationWarning` per class naming the base to subclass.

    :param trainer_cls: the trainer class (a registered ``trainer`` component).
    :returns: its role.
    :raises TrainerRoleError: the class is not a trainer, subclasses several role bases, or
        declares no role at all; the message names the bases to subclass.
    """
    name = f"{trainer_cls.__module__}.{trainer_cls.__qualname__}"
    roles = [role for base, role in _BASES.items() if issubclass(trainer_cls, base)]
    if len(roles) > 1:
        bases = " and ".join(_BASE_OF[r].__name__ for r in roles)
        raise TrainerRoleError(
            f"trainer {name} subclasses {bases}; a trainer has one role: subclass one of them",
            trainer=name,
        )
    if roles:
        return roles[0]
    if not issubclass(trainer_cls, Trainer):
        raise TrainerRoleError(
            f"{name} is not a trainer; subclass one of {_choices()} "
            f"(from rollhub.training)",
            trainer=name,
        )
    role = _legacy_role(trainer_cls)
    if role is None:
        raise TrainerRoleError(
            f"trainer {name} declares no role: it subclasses Trainer directly and neither "
            f"consumes, trains nor drives; subclass one of {_choices()} (from "
            f"rollhub.training) and implement its method",
            trainer=name,
        )
    if trainer_cls not in _warned:
        _warned.add(trainer_cls)
        warnings.warn(
            f"trainer {name} declares its role with Trainer's flags or methods; subclass "
            f"rollhub.training.{_BASE_OF[role].__name__} instead (the flags trains and drives "
            f"are deprecated)",
            DeprecationWarning,
            stacklevel=2,
        )
    return role


def _legacy_role(trainer_cls: type[Trainer]) -> TrainerRole | None:
    """The role an older direct subclass of Trainer declared (flags or an own ``consume``),
    in the precedence ``rollhub run`` gave them: driving first, then training."""
    if getattr(trainer_cls, "drives", False):
        return TrainerRole.LOOP_DRIVER
    if getattr(trainer_cls, "trains", False):
        return TrainerRole.POLICY_TRAINER
    if trainer_cls.consume is not Trainer.consume:
        return TrainerRole.CONSUMER
    return None


def _choices() -> str:
    return ", ".join(base.__name__ for base in _BASES)
