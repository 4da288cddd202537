"""Several policies through the core's loop: each trainer sees only its policy's records,
trains on its own reward and advances its own version; a frozen policy is never trained;
per-policy checkpoints resume."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import rollhub_gateway.plugin as gateway_plugin
from rollhub import hookimpl
from rollhub.policies import PolicyUpdates, takes_part
from rollhub.testing import make_hub
from rollhub.training import PolicyTrainer, StepResult, TrainerOptions, TrainingBatch
from rollhub.training.loop import TrainingLoop
from rollhub.training.policy_trainer import PolicyTrainers
from rollhub_gateway.models import load_tokenizer

AGENT = Path(__file__).parent / "agents" / "two_policy_agent.py"


class PolicyRecorder(PolicyTrainer):
    """Trains nothing; keeps each batch; publishes ``{"policy": name, "step": s}``."""

    name = "policy-recorder"

    class Options(TrainerOptions):
        lr: float = 1.0

    def __init__(self, options: Any = None, *, context: Any = None) -> None:
        super().__init__(options, context=context)
        self.batches: list[TrainingBatch] = []
        self.loaded: tuple[Path, dict[str, Any]] | None = None
        self.dropped: list[dict[str, Any]] = []

    async def initial_policy(self) -> Any:
        return {"policy": self.context.policy, "restored": self.loaded is not None}

    async def step(self, batch: TrainingBatch) -> StepResult:
        self.batches.append(batch)
        return StepResult(
            batch.weight_version + 1,
            {"loss": 0.5, "lr": self.options.lr},
            {"policy": self.context.policy, "step": batch.step},
        )

    async def save_state(self, directory: Path) -> dict[str, Any]:
        (directory / "weights.txt").write_text(self.context.policy or "")
        return {"batches": len(self.batches), "policy": self.context.policy}

    async def load_state(self, directory: Path, state: dict[str, Any]) -> None:
        assert (directory / "weights.txt").read_text() == self.context.policy
        self.loaded = (directory, state)

    async def drop_state(self, state: dict[str, Any]) -> None:
        self.dropped.append(state)


class _Plugin:
    @hookimpl
    def rollhub_register_components(self, registry: Any) -> None:
        registry.add_trainer(PolicyRecorder)


@pytest.fixture(scope="module")
def reply() -> list[int]:
    tok = load_tokenizer("smollm2-135m-instruct")
    return [*tok.encode("fine", add_special_tokens=False), tok.convert_tokens_to_ids("<|im_end|>")]


def _config(tmp_path: Path, reply: list[int], **training: Any) -> dict[str, Any]:
    return {
        "experiment": {
            "name": "policies",
            "n_samples": 4,
            "concurrency": 8,
            "timeout_s": 60,
            "progress": False,
            "seed": 5,
        },
        "runtime": {"name": "local", "app": f"{AGENT}:app", "workers": 2},
        "store": {"url": f"file://{tmp_path / 'store'}"},
        "token_source": {
            "name": "gateway",
            "log_turns": False,
            "engine": {"name": "scripted", "options": {"reply": reply}},
        },
        "trainer": {"name": "policy-recorder"},
        "training": {"batch_groups": 1, "checkpoint_every": 1, "shuffle": False, **training},
        "rewards": {"weights": {"verdict": 0.0}},
        "policies": [
            {"name": "proposer", "reward_key": "solved"},
            {
                "name": "checker",
                "model_id": "checker-v2",
                "reward_key": "verdict",
                "trainer": {"lr": 0.25},
            },
            {"name": "partner", "trainable": False},
        ],
    }


def _routes(hub: Any) -> Any:
    return hub.token_source.gateway.policies


async def test_each_policy_trains_on_its_own_records_reward_and_version(tmp_path, reply):
    run = tmp_path / "run"
    config = _config(tmp_path, reply, steps=2)
    config["policies"].append({"name": "judge", "trainable": False})  # never called here
    hub = make_hub(config, gateway_plugin, _Plugin(), run_dir=run)
    payloads = [{"id": "p0"}, {"id": "p1"}]
    async with hub:
        await TrainingLoop(hub, payloads, run_dir=run).run()
        trainer = hub.trainer
        routes = _routes(hub)
        published = {r.name: list(r.backend.published) for r in routes}
        served = {r.name: [t.weight_version for t in r.backend.turns] for r in routes}
    assert isinstance(trainer, PolicyTrainers)
    assert set(trainer.trainers) == {"proposer", "checker"}  # the frozen partner has none
    assert trainer.trainers["checker"].options.lr == 0.25  # its own trainer options
    for name, rewards in (("proposer", [0, 1, 0, 1]), ("checker", [0, 0, 1, 1])):
        batches = trainer.trainers[name].batches
        assert [b.weight_version for b in batches] == [0, 1]
        for b in batches:
            (group,) = b.groups
            for e in group.episodes:
                assert e.traces and {t.policy for t in e.traces} == {name}
                # on-policy: its turns were sampled by the version it trains
                assert {t.weight_version for r in e.traces for t in r.turns} == {b.weight_version}
            assert [e.reward for e in group.episodes] == rewards
            sign = [1 if r else -1 for r in rewards]
            assert [b.advantages[e.episode_id] for e in group.episodes] == pytest.approx(
                sign, rel=1e-4
            )
    # the agent got every policy's model id; the default is the first policy's
    result = trainer.trainers["proposer"].batches[0].groups[0].episodes[0].result
    assert result["models"] == {
        "proposer": "proposer",
        "checker": "checker-v2",
        "partner": "partner",
        "judge": "judge",
    }
    assert result["default_model"] == "proposer"
    # each trainable engine got its own policy's weights, a version per step; the frozen none
    assert published["proposer"] == [
        ({"policy": "proposer", "restored": False}, 0),
        ({"policy": "proposer", "step": 0}, 1),
        ({"policy": "proposer", "step": 1}, 2),
    ]
    assert [v for _, v in published["checker"]] == [0, 1, 2]
    assert published["partner"] == []
    assert served["partner"] == [0] * 8 and served["proposer"] == [0] * 4 + [1] * 4
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["policy/proposer/weight_version"] for r in rows] == [1, 2]
    assert [r["policy/checker/lr"] for r in rows] == [0.25, 0.25]
    assert [r["policy/proposer/success_rate"] for r in rows] == [0.5, 0.5]
    assert rows[0]["policy/partner/sampled_tokens"] == 4 * len(reply)
    assert "policy/partner/loss" not in rows[0]  # frozen: figures, never a trainer's
    # a frozen policy with no records in the episodes (a judge) has no figures of its own
    assert not [k for r in rows for k in r if k.startswith("policy/judge/")]


async def test_per_policy_checkpoints_resume(tmp_path, reply):
    run = tmp_path / "run"
    payloads = [{"id": "p0"}, {"id": "p1"}]
    first = make_hub(_config(tmp_path, reply, steps=1), gateway_plugin, _Plugin(), run_dir=run)
    async with first:
        await TrainingLoop(first, payloads, run_dir=run).run()
    ckpt = run / "checkpoints" / "step-000001" / "trainer"
    state = json.loads((run / "checkpoints" / "step-000001" / "state.json").read_text())
    assert state["trainer"]["versions"] == {"proposer": 1, "checker": 1, "partner": 0}
    for name in ("proposer", "checker"):
        assert (ckpt / "policies" / name / "weights.txt").read_text() == name
    assert not (ckpt / "policies" / "partner").exists()
    again = make_hub(_config(tmp_path, reply, steps=2, keep_checkpoints=1), gateway_plugin,
                     _Plugin(), run_dir=run)
    async with again:
        loop = TrainingLoop(again, payloads, run_dir=run, resume=True)
        await loop.run()
        trainer = again.trainer
        published = {r.name: list(r.backend.published) for r in _routes(again)}
    for name in ("proposer", "checker"):
        t = trainer.trainers[name]
        assert t.loaded is not None and t.loaded[0] == ckpt / "policies" / name
        assert t.loaded[1]["policy"] == name
        assert [b.weight_version for b in t.batches] == [1]  # resumed at its own version
        assert published[name][0] == ({"policy": name, "restored": True}, 1)
        # step 1's checkpoint went once step 2's was written: each trainer got its own state
        assert t.dropped == [{"batches": 1, "policy": name}]
    assert trainer.versions == {"proposer": 2, "checker": 2, "partner": 0}
    assert published["partner"] == []


def test_policy_updates_are_a_read_only_mapping():
    from rollhub.policies import PolicyUpdate

    u = PolicyUpdates({"a": PolicyUpdate(None, 3)})
    assert dict(u.versions()) == {"a": 3} and list(u) == ["a"] and "a=3" in repr(u)


async def test_a_failed_episode_charges_only_the_policies_it_reached(tmp_path, reply):
    # zero_reward imputes 0 to a failed episode; its turns are dropped, so the hub notes
    # which policies sampled before it failed: the checker never ran there
    config = _config(tmp_path, reply)
    config["rewards"]["on_failure"] = "zero_reward"
    hub = make_hub(config, gateway_plugin, _Plugin(), run_dir=tmp_path / "run")
    async with hub:
        (group,) = [g async for g in hub.iter_groups([{"id": "p0", "fail_after_draft": True}])]
    failed = [e for e in group.episodes if not e.ok]
    assert [e.sample_index for e in failed] == [1, 3] and not any(e.traces for e in failed)
    assert all(e.metrics["policies_sampled"] == ["proposer"] for e in failed)
    assert all(e.metrics.get("reward_imputed") for e in failed)
    proposer, checker, _ = hub.config.policies
    assert all(takes_part(e, proposer) and not takes_part(e, checker) for e in failed)
    # the ok episodes are everyone's, as before
    assert all(takes_part(e, checker) for e in group.episodes if e.ok)
