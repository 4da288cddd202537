"""A policy trainer for the cluster tests: each step appends what it was given to train
(episode id, status, reward) to ``trained.jsonl`` in the run directory, and its state is
the number of steps it took (checkpointed, so a resumed run goes on counting)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rollhub import hookimpl
from rollhub.training import PolicyTrainer, StepResult, TrainingBatch


class RecordingTrainer(PolicyTrainer):
    """Trains nothing; records every trainable episode of every step."""

    name = "recording"

    def __init__(self, options: Any = None, *, run_dir: Path | None = None, **kw: Any) -> None:
        super().__init__(options, run_dir=run_dir, **kw)
        self.done = 0

    async def step(self, batch: TrainingBatch) -> StepResult:
        self.done += 1
        assert self.run_dir is not None
        with open(self.run_dir / "trained.jsonl", "a", encoding="utf-8") as fh:
            for episode, advantage in batch.trainable():
                fh.write(json.dumps({"step": batch.step, "episode_id": episode.episode_id,
                                     "status": episode.status, "reward": episode.reward,
                                     "advantage": advantage}) + "\n")  # fmt: skip
        return StepResult(batch.weight_version + 1, {"loss": 1.0 / (1 + batch.step)})

    async def save_state(self, directory: Path) -> dict[str, Any]:
        return {"done": self.done}

    async def load_state(self, directory: Path, state: dict[str, Any]) -> None:
        self.done = int(state["done"])


@hookimpl
def rollhub_register_components(registry: Any) -> None:
    registry.add_trainer(RecordingTrainer)
