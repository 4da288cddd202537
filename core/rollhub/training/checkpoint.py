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

__all__ = ["Checkpoint", "dataset_fingerprint", "latest_checkpoint", "write_checkpoint"]

log = logging.getLogger(__name__)

STATE_FILE = "state.json"


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
) -> Path:
    """Write ``ckpt`` (and the trainer's files) under ``root``; return its directory.

    :param keep: delete all but the newest ``keep`` checkpoints afterwards (None: keep all).
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
                shutil.rmtree(old, ignore_errors=True)
                log.info("checkpoint %s deleted (keep_checkpoints=%d)", old, keep)
    return final


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
