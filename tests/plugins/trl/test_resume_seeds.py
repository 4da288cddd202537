"""A resumed TRL run samples with new episode seeds, not the killed run's.

``examples/math/train-trl.toml`` on one prompt (1 prompt × 2 samples a step), run as
``rollhub run`` runs it: resumed before any checkpoint existed (as a run stopped during
its base evaluation is), trained 2 steps (TRL checkpoints after step 2, and the process
ends as a killed one would), resumed to a third step (recorded, but after the newest
checkpoint, as a run killed before its next checkpoint leaves it), then resumed to a
fourth. With one prompt every step is a new round of its seeds, so each resumed step must
draw the round an uninterrupted run would, repeat no seed, and the third step, run again
from the checkpoint, must be recorded once. Each resume from a checkpoint loads its
trained layers through the trainer's own checkpoint format.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from rollhub.commands.checks import check_run_config, load_payloads
from rollhub.commands.run_training import train
from rollhub.config import load_config
from rollhub.export import read_rows
from rollhub.hubs.async_hub import AsyncHub
from rollhub.seeding import episode_seed
from rollhub.training.checkpoint import SEED_ROUNDS_FILE
from rollhub_trl import grpo_trainer
from rollhub_trl.trained_weights import load_trained

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
CONFIG = ROOT / "examples" / "math" / "train-trl.toml"

ONE_PROMPT = {
    "ROLLHUB_EXPERIMENT__MAX_PROMPTS": "1",
    "ROLLHUB_EXPERIMENT__N_SAMPLES": "2",
    "ROLLHUB_TRAINING__BATCH_GROUPS": "1",
    "ROLLHUB_TRAINING__EPOCHS": "4",  # an epoch is one step
    "ROLLHUB_TRAINING__CHECKPOINT_EVERY": "2",
}


def _train(tmp: Path, run_dir: Path, steps: int, *, resume: bool) -> int:
    """Train the run to ``steps`` steps in a new hub (a new ``rollhub run``); return the
    experiment seed."""
    env = {**ONE_PROMPT, "ROLLHUB_TRAINING__STEPS": str(steps),
           "ROLLHUB_STORE__URL": f'"file://{tmp / "store"}"'}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        cfg = load_config(CONFIG)
    cfg.experiment.progress = False
    cfg.experiment.sampling["max_tokens"] = 16  # the seeds are what is looked at
    cfg.eval.before_training = cfg.eval.after_training = False
    host = check_run_config(cfg)
    hub = AsyncHub(cfg, host=host, run_dir=run_dir)
    asyncio.run(train(hub, load_payloads(cfg), run_dir, resume=resume))
    return cfg.experiment.seed


@pytest.fixture(scope="module")
def resumed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("trl-resume")
    run_dir = tmp / "run"
    run_dir.mkdir()
    loaded: list[tuple[str, bool]] = []

    def spy(folder: Path, *args: Any) -> bool:  # TRL's resume reads the trained layers
        done = load_trained(folder, *args)
        loaded.append((folder.name, done))
        return done

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(grpo_trainer, "load_trained", spy)
        # resumed before TRL saved any checkpoint (the first process was stopped during its
        # base evaluation): it starts at step 0, checkpoints after step 2 and ends as if killed
        seed = _train(tmp, run_dir, 2, resume=True)
        _train(tmp, run_dir, 3, resume=True)
        # TRL saves when training ends; a process killed after recording step 3, before any
        # checkpoint of it, leaves only the checkpoint of step 2
        shutil.rmtree(run_dir / "trl" / "checkpoint-3")
        _train(tmp, run_dir, 4, resume=True)  # from the checkpoint of step 2: step 3 again
    return {"dir": run_dir, "seed": seed, "loaded": loaded}


def test_each_resume_loaded_the_trained_layers_of_its_checkpoint(
    resumed: dict[str, Any],
) -> None:
    assert resumed["loaded"] == [("checkpoint-2", True), ("checkpoint-2", True)]


def test_the_resumed_step_draws_the_seeds_an_uninterrupted_run_would(
    resumed: dict[str, Any],
) -> None:
    rows = read_rows(resumed["dir"] / "episodes.jsonl")
    seeds = {(r["step"], r["group_id"], r["sample_index"]): json.loads(r["metrics"])[
        "sampling_seed"] for r in rows}
    assert sorted({step for step, _, _ in seeds}) == [0, 1, 2, 3]
    assert len(seeds) == len(rows) == 8  # each step once: nothing recorded twice
    metrics = [json.loads(x)["step"] for x in (resumed["dir"] / "metrics.jsonl").open()]
    assert metrics == [0, 1, 2, 3]
    # one prompt: step s runs its samples for the (s + 1)-th time
    assert seeds == {(s, gid, i): episode_seed(resumed["seed"], gid, i, s)
                     for (s, gid, i) in seeds}
    assert len(set(seeds.values())) == len(seeds)


def test_trls_checkpoint_keeps_the_seed_rounds(resumed: dict[str, Any]) -> None:
    (gid,) = {r["group_id"] for r in read_rows(resumed["dir"] / "episodes.jsonl")}
    # as step 3 began, both samples of the one prompt had run twice (rounds 0 and 1)
    saved = resumed["dir"] / "trl" / "checkpoint-2" / SEED_ROUNDS_FILE
    assert json.loads(saved.read_text()) == {gid: [1, 1]}
    assert not list(saved.parent.glob(f".{SEED_ROUNDS_FILE}*"))  # no temporary file left
