"""The training loop with a trainer written here, on real worker processes and a file store."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from rollhub import hookimpl
from rollhub.errors import ConfigError, UsageError
from rollhub.testing import make_hub
from rollhub.training import PolicyTrainer, StepResult, TrainingBatch
from rollhub.training.loop import TrainingLoop, schedule
from rollhub.training.plot import plot_training

AGENT = Path(__file__).parent / "agents" / "policy_agent.py"


class RecordingTrainer(PolicyTrainer):
    """Trains nothing; records each batch and answers with the next version."""

    name = "recording"
    batches: list[TrainingBatch]
    step_delay = 0.0
    prepare_fails = False

    def __init__(self, options: Any = None, **kw: Any) -> None:
        super().__init__(options, **kw)
        self.batches = []
        self.prepared: list[tuple[Any, int, int]] = []  # each with the steps done by then
        self.state_loaded: dict[str, Any] | None = None
        self.dropped: list[dict[str, Any]] = []

    async def prepare(self, episode: Any, step: int) -> None:
        self.prepared.append((episode, step, len(self.batches)))
        if self.prepare_fails:
            raise RuntimeError("prepare broke")

    async def step(self, batch: TrainingBatch) -> StepResult:
        self.batches.append(batch)
        await asyncio.sleep(self.step_delay)
        loss = -sum(a for _, a in batch.trainable())
        return StepResult(batch.weight_version + 1, {"loss": loss, "trained_on": len(batch.trainable())})

    async def save_state(self, directory: Path) -> dict[str, Any]:
        (directory / "weights.txt").write_text(str(len(self.batches)))
        return {"batches": len(self.batches)}

    async def load_state(self, directory: Path, state: dict[str, Any]) -> None:
        self.state_loaded = {**state, "file": (directory / "weights.txt").read_text()}

    async def drop_state(self, state: dict[str, Any]) -> None:
        self.dropped.append(state)


class _Plugin:
    @hookimpl
    def rollhub_register_components(self, registry: Any) -> None:
        registry.add_trainer(RecordingTrainer)

    def __init__(self) -> None:
        self.steps: list[tuple[int, dict[str, Any]]] = []

    @hookimpl
    def rollhub_training_step(self, step: int, metrics: dict[str, Any]) -> None:
        self.steps.append((step, dict(metrics)))


def _config(tmp_path: Path, **training: Any) -> dict[str, Any]:
    return {
        "experiment": {"name": "loop", "n_samples": 4, "concurrency": 16, "timeout_s": 30,
                       "progress": False, "seed": 3,
                       **training.pop("experiment", {})},
        "runtime": {"name": "local", "app": f"{AGENT}:app", "workers": 2},
        "store": {"url": f"file://{tmp_path / 'store'}"},
        "trainer": {"name": "recording"},
        "training": {"batch_groups": 2, "checkpoint_every": 1, **training},
    }


def _payloads(n: int, log: Path, **extra: Any) -> list[dict[str, Any]]:
    return [{"id": f"p{i}", "log": str(log), **extra} for i in range(n)]


def test_schedule_is_deterministic_and_covers_each_epoch():
    items = [{"id": str(i)} for i in range(5)]
    a = schedule(items, epochs=2, shuffle=True, seed=1)
    assert a == schedule(items, epochs=2, shuffle=True, seed=1)
    assert sorted(p["id"] for p in a[:5]) == sorted(p["id"] for p in a[5:]) == list("01234")
    assert schedule(items, epochs=1, shuffle=False, seed=1) == items


def _depths() -> list[dict[str, Any]]:
    return [
        {"id": f"{split}-{i}", "split": split}
        for split, n in (("d1", 40), ("d2", 80), ("d3", 20))
        for i in range(n)
    ]


def test_a_stratified_schedule_holds_every_split_in_proportion_in_each_batch():
    items = _depths()
    for seed in (1, 2, 3):
        plain = schedule(items, epochs=2, shuffle=True, seed=seed)
        mixed = schedule(items, epochs=2, shuffle=True, seed=seed, stratify="split")
        assert sorted(p["id"] for p in mixed) == sorted(p["id"] for p in plain)
        assert mixed == schedule(items, epochs=2, shuffle=True, seed=seed, stratify="split")

        def mixes(order: list[Any], size: int) -> set[tuple[int, ...]]:
            return {
                tuple(sum(p["split"] == s for p in order[k : k + size]) for s in ("d1", "d2", "d3"))
                for k in range(0, len(order), size)
            }

        # batches of 7 are the dataset's 2:4:1 exactly; of 4, within one of 8/7, 16/7, 4/7
        assert mixes(mixed, 7) == {(2, 4, 1)}
        assert mixes(mixed, 4) <= {(1, 2, 1), (1, 3, 0), (2, 2, 0)}
        assert not mixes(plain, 4) <= {(1, 2, 1), (1, 3, 0), (2, 2, 0)}  # what it fixes
    # stratified, the shuffle still decides which prompt of a split comes when
    firsts = {schedule(items, epochs=1, shuffle=True, seed=s, stratify="split")[0]["id"]
              for s in range(5)}
    assert len(firsts) > 1


def test_the_loop_trains_in_the_configured_stratified_order(tmp_path):
    items = _depths()
    hub = make_hub(_config(tmp_path, stratify="split"), _Plugin(), run_dir=tmp_path / "run")
    loop = TrainingLoop(hub, items, run_dir=tmp_path / "run")
    assert loop.order == schedule(items, epochs=1, shuffle=True, seed=3, stratify="split")
    assert loop.order != schedule(items, epochs=1, shuffle=True, seed=3)


def test_stratify_names_the_missing_field():
    items = [*_depths()[:3], {"id": "odd"}]
    with pytest.raises(ConfigError, match=r"training.stratify = 'split'.*no 'split'.*prompt 3 .*'odd'"):
        schedule(items, epochs=1, shuffle=True, seed=1, stratify="split")


async def test_on_policy_steps_advantages_versions_and_outputs(tmp_path):
    log = tmp_path / "served.jsonl"
    plugin = _Plugin()
    hub = make_hub(_config(tmp_path, epochs=1), plugin, run_dir=tmp_path / "run")
    payloads = _payloads(5, log, fail_index=3)  # sample 3 of every group fails
    async with hub:
        loop = TrainingLoop(hub, payloads, run_dir=tmp_path / "run")
        summary = await loop.run()
        trainer = hub.trainer
    # 5 prompts, 2 per step: 3 steps, the last one smaller
    assert summary["steps"] == 3 and summary["weight_version"] == 3
    assert [len(b.groups) for b in trainer.batches] == [2, 2, 1]
    assert [b.weight_version for b in trainer.batches] == [0, 1, 2]
    trained_ids = [g.group_id for b in trainer.batches for g in b.groups]
    assert sorted(trained_ids) == [f"p{i}" for i in range(5)]  # each prompt exactly once
    assert trained_ids == [p["id"] for p in schedule(payloads, epochs=1, shuffle=True, seed=3)]
    for b in trainer.batches:
        for g in b.groups:
            # on-policy: sampled by exactly the version being trained
            assert {e.weight_version for e in g.episodes} == {b.weight_version}
            failed = [e for e in g.episodes if not e.ok]
            assert [e.sample_index for e in failed] == [3]
            assert failed[0].episode_id not in b.advantages
            # rewards 0,1,0 for samples 0..2: GRPO advantages by hand
            adv = [b.advantages[e.episode_id] for e in g.episodes if e.ok]
            # mean 1/3, population std sqrt(2)/3
            assert adv == pytest.approx([-(2**-0.5), 2**0.5, -(2**-0.5)], rel=1e-4)
    # each episode was handed over once, before its step began, failed ones too
    episodes = {e.episode_id: (s, e) for s, b in enumerate(trainer.batches)
                for g in b.groups for e in g.episodes}
    assert sorted(e.episode_id for e, _, _ in trainer.prepared) == sorted(episodes)
    for episode, step, steps_done in trainer.prepared:
        assert (step, episode) == episodes[episode.episode_id] and steps_done == step
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert rows[0]["reward_mean"] == pytest.approx(1 / 3)
    assert rows[0]["episodes"] == 8 and rows[0]["episodes_failed"] == 2
    assert rows[0]["episodes_trained"] == 6 and rows[0]["trained_on"] == 6
    assert [r["weight_version"] for r in rows] == [1, 2, 3]
    assert all(r["staleness_max"] == 0 for r in rows)
    assert [s for s, _ in plugin.steps] == [0, 1, 2]
    assert plugin.steps[1][1] == {k: v for k, v in rows[1].items() if k != "step"}
    # a checkpoint every step, the newest keep_checkpoints (2 by default) kept
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == [
        "latest", "step-000002", "step-000003"]
    assert (tmp_path / "run" / "checkpoints" / "latest").read_text() == "step-000003"
    # the deleted checkpoint's trainer state was handed back, to free what it names elsewhere
    assert trainer.dropped == [{"batches": 1}]
    assert plot_training(tmp_path / "run" / "metrics.jsonl", tmp_path / "run" / "training.png")
    assert (tmp_path / "run" / "training.png").stat().st_size > 10_000


async def test_a_failing_prepare_loses_no_episode(tmp_path, caplog):
    RecordingTrainer.prepare_fails = True
    try:
        hub = make_hub(_config(tmp_path, epochs=1), _Plugin(), run_dir=tmp_path / "run")
        async with hub:
            await TrainingLoop(hub, _payloads(2, tmp_path / "log"), run_dir=tmp_path / "run").run()
            trainer = hub.trainer
    finally:
        RecordingTrainer.prepare_fails = False
    (batch,) = trainer.batches
    assert len(trainer.prepared) == 8 == sum(len(g.episodes) for g in batch.groups)
    assert caplog.text.count("on_episode failed") == 8 and "prepare broke" in caplog.text


@pytest.mark.parametrize("window", [0, 1])
async def test_bounded_staleness(tmp_path, window):
    """k = 0 samples each step with the weights it trains; k = 1 runs one version ahead."""
    RecordingTrainer.step_delay = 0.6
    try:
        cfg = _config(tmp_path, epochs=1, experiment={"max_staleness": window, "n_samples": 2})
        hub = make_hub(cfg, _Plugin(), run_dir=tmp_path / "run")
        async with hub:
            await TrainingLoop(hub, _payloads(8, tmp_path / "log"), run_dir=tmp_path / "run").run()
            batches = hub.trainer.batches
    finally:
        RecordingTrainer.step_delay = 0.0
    lags = [b.weight_version - e.weight_version for b in batches for e in b.episodes]
    assert max(lags) == window
    assert min(lags) >= 0
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert max(r["staleness_max"] for r in rows) == window


async def test_resume_continues_at_the_checkpoint(tmp_path):
    log = tmp_path / "served.jsonl"
    payloads = _payloads(6, log)
    cfg = _config(tmp_path, epochs=1, steps=2, checkpoint_every=1)
    hub = make_hub(cfg, _Plugin(), run_dir=tmp_path / "run")
    async with hub:
        await TrainingLoop(hub, payloads, run_dir=tmp_path / "run").run()
    first = [json.loads(x)["id"] for x in log.read_text().splitlines()]
    log.unlink()
    # a killed run logged step 2's episodes after its last checkpoint: they run again
    with (tmp_path / "run" / "episodes.jsonl").open("a") as f:
        f.write(json.dumps({"step": 2, "episode_id": "sampled-before-the-kill"}) + "\n")

    cfg["training"]["steps"] = None  # now the whole dataset
    hub = make_hub(cfg, _Plugin(), run_dir=tmp_path / "run")
    async with hub:
        summary = await TrainingLoop(hub, payloads, run_dir=tmp_path / "run", resume=True).run()
        trainer = hub.trainer
    assert trainer.state_loaded == {"batches": 2, "file": "2"}
    assert [b.step for b in trainer.batches] == [2]
    assert [b.weight_version for b in trainer.batches] == [2]
    second = [json.loads(x)["id"] for x in log.read_text().splitlines()]
    assert not set(first) & set(second)  # nothing sampled twice
    assert sorted(set(first) | set(second)) == [f"p{i}" for i in range(6)]
    assert summary["weight_version"] == 3
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    # the run's clock goes on across the resume (it restarted at 0 before)
    clock = [r["elapsed_s"] for r in rows]
    assert clock == sorted(clock) and clock[2] > clock[1] > 0
    path = tmp_path / "run" / "episodes.jsonl"
    episodes = [json.loads(x) for x in path.read_text().splitlines()]
    assert [r["step"] for r in episodes] == [0] * 8 + [1] * 8 + [2] * 8  # 2 groups x 4 a step
    assert "sampled-before-the-kill" not in {r["episode_id"] for r in episodes}


async def test_resume_refuses_another_dataset_and_a_fresh_run_refuses_an_old_dir(tmp_path):
    cfg = _config(tmp_path, steps=1)
    hub = make_hub(cfg, _Plugin(), run_dir=tmp_path / "run")
    async with hub:
        await TrainingLoop(hub, _payloads(4, tmp_path / "l"), run_dir=tmp_path / "run").run()
        with pytest.raises(UsageError, match="already holds a run"):
            await TrainingLoop(hub, _payloads(4, tmp_path / "l"), run_dir=tmp_path / "run").run()
        with pytest.raises(UsageError, match="another dataset"):
            await TrainingLoop(hub, _payloads(5, tmp_path / "l"), run_dir=tmp_path / "run",
                               resume=True).run()


async def test_a_trainer_that_does_not_train_is_refused(tmp_path):
    cfg = _config(tmp_path)
    cfg["trainer"] = {"name": "export"}
    hub = make_hub(cfg, run_dir=tmp_path / "run")
    async with hub:
        with pytest.raises(UsageError, match="does not train"):
            await TrainingLoop(hub, _payloads(2, tmp_path / "l"), run_dir=tmp_path / "run").run()


def test_config_check_validates_metric_sinks(tmp_path):
    from rollhub.config import parse_config
    from rollhub.errors import ConfigError, UnknownComponentError
    from rollhub.plugin_host.settings import check_config
    from rollhub.testing import make_host

    host = make_host(_Plugin())
    good = _config(tmp_path, metric_sinks=["tensorboard"], sinks={"tensorboard": {"log_dir": "tb"}})
    check_config(host, parse_config(good, env={}))
    with pytest.raises(UnknownComponentError, match="wandbb"):
        check_config(host, parse_config(_config(tmp_path, metric_sinks=["wandbb"]), env={}))
    bad = _config(tmp_path, metric_sinks=["wandb"], sinks={"wandb": {"projekt": "x"}})
    with pytest.raises(ConfigError, match=r"training\.sinks\.wandb\.projekt"):
        check_config(host, parse_config(bad, env={}))
    unused = _config(tmp_path, sinks={"mlflow": {}})
    with pytest.raises(ConfigError, match="does not name"):
        check_config(host, parse_config(unused, env={}))


def test_the_idle_clock_counts_only_time_with_nothing_in_flight(monkeypatch) -> None:
    from rollhub.training import loop

    now = [100.0]
    monkeypatch.setattr(loop.time, "monotonic", lambda: now[0])
    clock = loop.IdleClock()  # idle from 100
    now[0] = 103.0
    clock.enter()  # busy from 103
    now[0] = 104.0
    clock.enter()
    now[0] = 106.0
    clock.leave()
    now[0] = 107.0
    clock.leave()  # idle from 107
    # windows come in order, one per step
    assert clock.idle_between(100.0, 102.5) == pytest.approx(2.5)
    assert clock.idle_between(102.5, 110.0) == pytest.approx(0.5 + 3.0)
