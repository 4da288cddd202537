"""``[training] keep_episodes``: every episode, or a deterministic fraction of them."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from rollhub.config import parse_config
from rollhub.episode import Episode, EpisodeGroup
from rollhub.errors import ConfigError
from rollhub.testing import make_hub
from rollhub.training import TrainingBatch
from rollhub.training.loop import TrainingLoop
from rollhub.training.recorder import StepRecorder, keeps_episode

from tests.core.training.test_loop import _config, _payloads, _Plugin


def test_the_default_keeps_all_and_a_fraction_is_accepted():
    assert parse_config({}).training.keep_episodes == "all"
    assert parse_config({"training": {"keep_episodes": 0.1}}).training.keep_episodes == 0.1
    assert parse_config({"training": {"keep_episodes": 1}}).training.keep_episodes == 1.0


@pytest.mark.parametrize("bad", [0, -0.5, 1.5, "some", True, "0.1"])
def test_a_bad_value_is_a_config_error_naming_the_field(bad):
    with pytest.raises(ConfigError) as err:
        parse_config({"training": {"keep_episodes": bad}})
    assert err.value.field == "training.keep_episodes"
    assert "training.keep_episodes" in str(err.value)


def test_the_choice_is_deterministic_and_about_the_fraction():
    ids = [f"calc-{i:05d}-{i % 8}-{i * 7919:x}" for i in range(20_000)]
    kept = [i for i in ids if keeps_episode(i, 0.1)]
    assert kept == [i for i in ids if keeps_episode(i, 0.1)]
    assert 0.09 < len(kept) / len(ids) < 0.11
    # a larger fraction keeps a superset: the same episode is never dropped for more disk
    assert set(kept) <= {i for i in ids if keeps_episode(i, 0.5)}
    assert all(keeps_episode(i, "all") and keeps_episode(i, 1.0) for i in ids[:100])


def _batch(step: int, n_groups: int, n: int) -> TrainingBatch:
    groups = []
    for g in range(n_groups):
        eps = [Episode(f"s{step}-g{g}-{i}", f"s{step}-g{g}", f"s{step}-g{g}-{i}", i, "ok",
                       reward=float(i % 2)) for i in range(n)]
        groups.append(EpisodeGroup(group_id=f"s{step}-g{g}", payload={}, episodes=eps))
    advantages = {e.episode_id: 0.5 for grp in groups for e in grp.episodes}
    return TrainingBatch(step=step, groups=groups, advantages=advantages, weight_version=step)


def _hub(keep: object) -> SimpleNamespace:
    cfg = parse_config({"training": {"keep_episodes": keep}})
    return SimpleNamespace(config=cfg, exp_id="keep")


def test_the_recorder_writes_only_the_kept_episodes(tmp_path: Path):
    batch = _batch(0, 50, 8)
    for d in "abc":
        (tmp_path / d).mkdir()
    StepRecorder(_hub(0.25), tmp_path / "a", total_steps=1).keep_episodes(batch)
    StepRecorder(_hub(0.25), tmp_path / "b", total_steps=1).keep_episodes(batch)
    StepRecorder(_hub("all"), tmp_path / "c", total_steps=1).keep_episodes(batch)
    read = lambda d: [json.loads(x) for x in (tmp_path / d / "episodes.jsonl").read_text().splitlines()]  # noqa: E731
    a, b, c = read("a"), read("b"), read("c")
    assert len(c) == 400
    assert [r["episode_id"] for r in a] == [r["episode_id"] for r in b]
    assert 60 < len(a) < 140  # about a quarter of 400
    assert {r["episode_id"] for r in a} == {
        e.episode_id for e in batch.episodes if keeps_episode(e.episode_id, 0.25)
    }
    assert all(r["step"] == 0 and r["advantage"] == 0.5 and r["trained"] for r in a)


def test_an_explicit_keep_wins_over_the_config(tmp_path: Path):
    rec = StepRecorder(_hub("all"), tmp_path, total_steps=1, keep=0.5)
    assert rec.keep == 0.5
    assert StepRecorder(SimpleNamespace(exp_id="x"), tmp_path, total_steps=1).keep == "all"


async def test_a_training_run_keeps_the_sample(tmp_path: Path):
    cfg = _config(tmp_path, steps=2, checkpoint_every=0, keep_episodes=0.5)
    hub = make_hub(cfg, _Plugin(), run_dir=tmp_path / "run")
    async with hub:
        await TrainingLoop(hub, _payloads(4, tmp_path / "served.jsonl"),
                           run_dir=tmp_path / "run").run()
        trained = [e for b in hub.trainer.batches for e in b.episodes]
    rows = [json.loads(x) for x in (tmp_path / "run" / "episodes.jsonl").read_text().splitlines()]
    assert len(trained) == 16  # 2 steps x 2 groups x 4 samples were trained on
    assert [r["episode_id"] for r in rows] == [
        e.episode_id for e in trained if keeps_episode(e.episode_id, 0.5)
    ]
    metrics = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert len(metrics) == 2  # every step is still recorded
