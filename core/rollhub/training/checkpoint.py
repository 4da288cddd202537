"""Checkpoints of a training run: where to continue after a crash or a kill.

Layout inside the run directory::

    checkpoints/
      step-000010/
        state.json      steps done, weight version, dataset fingerprint, trainer state,
                        episode-seed rounds
        trainer/        whatever the trainer's save_state wrote (weights, optimizer)
      latest            the name of the newest complete checkpoint

A checkpoint directory is written under a temporary name and renamed when complete, and
``latest`` is replaced atomically, so a kill at any moment leaves the previous checkpoint
usable. Only the newest ``keep`` checkpoints stay: older ones are deleted after
``latest`` names the new one.

A trainer that drives its own loop (TRL) checkpoints into folders of its own; it keeps the
hub's episode-seed rounds there with :func:`save_seed_rounds` and continues them with
:func:`restore_seed_rounds`, so its resumed steps draw new seeds as the core loop's do.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rollhub.errors import UsageError
from rollhub.runs.run_dir import RunDir
from rollhub.seeding import hub_seeds

__all__ = [
    "SEED_ROUNDS_FILE",
    "Checkpoint",
    "dataset_fingerprint",
    "latest_checkpoint",
    "restore_seed_rounds",
    "save_seed_rounds",
    "write_checkpoint",
]

log = logging.getLogger(__name__)

STATE_FILE = "state.json"
#: the file :func:`save_seed_rounds` writes into another loop's checkpoint folder
SEED_ROUNDS_FILE = "rollhub_seed_rounds.json"


@dataclass
class Checkpoint:
    """What resuming needs.

    :param steps_done: training steps completed (the next step's index).
    :param weight_version: the policy version after those steps.
    :param dataset: fingerprint of the prompts (a different dataset cannot resume).
    :param trainer: the trainer's own JSON state (from ``save_state``).
    :param seed_rounds: the hub's episode-seed rounds as the next step begins
        (:meth:`rollhub.seeding.EpisodeSeeds.rounds`); None in checkpoints written before
        they were kept.
    :param directory: where it lives (set when loaded).
    """

    steps_done: int
    weight_version: int
    dataset: str
    trainer: dict[str, Any] = field(default_factory=dict)
    seed_rounds: dict[str, list[int]] | None = None
    directory: Path | None = None

    @property
    def trainer_dir(self) -> Path:
        """The folder the trainer saved into."""
        assert self.directory is not None
        return self.directory / "trainer"


def dataset_fingerprint(ids: Sequence[str]) -> str:
    """A short hash of the prompt ids in dataset order."""
    h = hashlib.sha256()
    for i in ids:
        h.update(i.encode())
        h.update(b"\0")
    return f"{len(ids)}:{h.hexdigest()[:16]}"


async def write_checkpoint(
    root: Path,
    ckpt: Checkpoint,
    save_trainer: Callable[[Path], Awaitable[dict[str, Any]]],
    *,
    keep: int | None = None,
    drop_trainer: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
) -> Path:
    """Write ``ckpt`` (and the trainer's files) under ``root``; return its directory.

    :param keep: delete all but the newest ``keep`` checkpoints afterwards (None: keep all).
    :param drop_trainer: called with the trainer state of each checkpoint deleted, after
        its directory went (:meth:`~rollhub.training.trainer.Trainer.drop_state`); what it
        raises is logged, not raised: the new checkpoint is written either way.
    """
    root.mkdir(parents=True, exist_ok=True)
    name = f"step-{ckpt.steps_done:06d}"
    final = root / name
    tmp = root / f".{name}.partial"
    if tmp.exists():
        shutil.rmtree(tmp)
    (tmp / "trainer").mkdir(parents=True)
    ckpt.trainer = await save_trainer(tmp / "trainer")
    state = {k: v for k, v in asdict(ckpt).items() if k != "directory"}
    (tmp / STATE_FILE).write_text(json.dumps(state, indent=2, sort_keys=True))
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    pointer = root / ".latest.tmp"
    pointer.write_text(name)
    os.replace(pointer, root / "latest")
    ckpt.directory = final
    log.info("checkpoint %s written", final)
    if keep is not None:
        steps = sorted(root.glob("step-*"), key=lambda p: p.name)
        for old in steps[: max(len(steps) - keep, 0)]:
            if old != final:
                await _delete(old, keep, drop_trainer)
    return final


async def _delete(
    old: Path, keep: int, drop_trainer: Callable[[dict[str, Any]], Awaitable[None]] | None
) -> None:
    try:
        trainer_state = json.loads((old / STATE_FILE).read_text()).get("trainer") or {}
    except (OSError, ValueError, AttributeError):
        trainer_state = {}
    shutil.rmtree(old, ignore_errors=True)
    log.info("checkpoint %s deleted (keep_checkpoints=%d)", old, keep)
    if drop_trainer is None or not trainer_state:
        return
    try:
        await drop_trainer(trainer_state)
    except Exception:  # a service that cannot delete does not stop the run
        log.warning("the trainer could not free the state of deleted checkpoint %s: %s",
                    old, trainer_state, exc_info=True)


def latest_checkpoint(run_dir: Path) -> Checkpoint | None:
    """The newest complete checkpoint of a run directory (None when there is none).

    :raises UsageError: ``latest`` names a checkpoint whose state cannot be read.
    """
    root = RunDir(run_dir).checkpoints
    pointer = root / "latest"
    if not pointer.exists():
        return None
    directory = root / pointer.read_text().strip()
    try:
        data = json.loads((directory / STATE_FILE).read_text())
        return Checkpoint(**data, directory=directory)
    except (OSError, ValueError, TypeError) as exc:
        raise UsageError(
            f"checkpoint {directory} is unreadable ({exc}); delete {pointer} to start over, "
            f"or point it at an older step-* folder"
        ) from exc


def save_seed_rounds(hub: object, directory: Path) -> Path | None:
    """Keep the hub's episode-seed rounds (:meth:`rollhub.seeding.EpisodeSeeds.rounds`) in
    ``directory``, a checkpoint folder another loop wrote; return the file (None for a hub
    without seeds).

    Call it when no episode runs ahead of the checkpoint: the rounds saved are the live
    counts. The file is written under a temporary name and renamed, so a kill leaves the
    whole file or none.
    """
    seeds = hub_seeds(hub)
    if seeds is None:
        return None
    path = directory / SEED_ROUNDS_FILE
    tmp = directory / f".{SEED_ROUNDS_FILE}.tmp"
    tmp.write_text(json.dumps(seeds.rounds(), indent=2, sort_keys=True))
    os.replace(tmp, path)
    return path


def restore_seed_rounds(hub: object, directory: Path) -> bool:
    """Continue the hub's episode-seed rounds from what :func:`save_seed_rounds` kept in
    ``directory``; False when the hub has no seeds or the checkpoint no rounds.

    A checkpoint without the file (written before the rounds were kept) resumes with a
    warning: the hub counts rounds from zero, so the resumed steps may draw seeds that
    episodes before the checkpoint drew.

    :raises UsageError: the file is there but does not hold seed rounds.
    """
    seeds = hub_seeds(hub)
    if seeds is None:
        return False
    path = directory / SEED_ROUNDS_FILE
    if not path.exists():
        log.warning("checkpoint %s predates seed rounds: the resumed run counts episode "
                    "seeds from round 0 and may repeat seeds of steps before it", directory)
        return False
    hint = "delete it to resume with rounds counted from zero"
    try:
        rounds = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path} is unreadable ({exc}); {hint}") from exc
    if not isinstance(rounds, dict) or not all(
        isinstance(row, list) and all(type(r) is int for r in row) for row in rounds.values()
    ):
        raise UsageError(f"{path} holds no seed rounds ({str(rounds)[:80]}); {hint}")
    seeds.restore(rounds)
    log.info("seed rounds of %d prompts restored from %s", len(rounds), path)
    return True
