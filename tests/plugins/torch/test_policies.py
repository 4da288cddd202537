"""Several policies on the embedded default: the real SmolLM2 engines (one per policy) and
one ``torch`` trainer per trainable policy. A frozen policy's weights never change; each
trainable policy's engine gets its own trained weights; per-policy checkpoints resume."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
import rollhub_gateway.plugin as gateway_plugin
import rollhub_torch.plugin as torch_plugin
import torch
from rollhub.sampling import SamplingParams
from rollhub.testing import make_hub
from rollhub.training.loop import TrainingLoop

pytestmark = pytest.mark.slow

AGENT = Path(__file__).parents[2] / "core" / "training" / "agents" / "two_policy_agent.py"


def _config(tmp_path: Path, steps: int) -> dict[str, Any]:
    return {
        "experiment": {
            "name": "torch-policies",
            "n_samples": 4,
            "concurrency": 4,
            "timeout_s": 300,
            "progress": False,
            "seed": 4,
            "sampling": {"temperature": 1.0, "max_tokens": 4},
        },
        "runtime": {"name": "local", "app": f"{AGENT}:app", "workers": 2},
        "store": {"url": f"file://{tmp_path / 'store'}"},
        "token_source": {
            "name": "gateway",
            "log_turns": False,
            "engine": {
                "name": "transformers",
                "options": {"max_batch_size": 4, "threads": 1, "prefix_cache_tokens": 0},
            },
        },
        "trainer": {"name": "torch", "learning_rate": 1e-3, "train_layers": 1, "threads": 1},
        "training": {"batch_groups": 1, "checkpoint_every": 1, "steps": steps, "shuffle": False},
        "rewards": {"weights": {"verdict": 0.0}},
        "policies": [
            {"name": "proposer", "reward_key": "solved"},
            {"name": "checker", "reward_key": "verdict"},
            {"name": "partner", "trainable": False},
        ],
    }


def _digest(model: Any) -> dict[str, str]:
    return {
        name: hashlib.sha256(p.detach().numpy().tobytes()).hexdigest()
        for name, p in model.named_parameters()
    }


async def test_frozen_weights_stay_trained_ones_move_and_checkpoints_resume(tmp_path):
    run = tmp_path / "run"
    payloads = [{"id": "q0"}, {"id": "q1"}]  # 4 samples: both reward keys vary in a group
    hub = make_hub(_config(tmp_path, steps=1), gateway_plugin, torch_plugin, run_dir=run)
    async with hub:
        routes = hub.token_source.gateway.policies
        before = {r.name: _digest(r.backend.model) for r in routes}
        await TrainingLoop(hub, payloads, run_dir=run).run()
        for r in routes:  # a row sampled now is admitted after the engine took new weights
            gen = await r.backend.generate([1, 2, 3], SamplingParams(max_tokens=1, temperature=0))
            assert gen.weight_version == (None if r.name == "partner" else 1)
        after = {r.name: _digest(r.backend.model) for r in routes}
        trained = {
            name: {k: p.detach().clone() for k, p in t.trained.items()}
            for name, t in hub.trainer.trainers.items()
        }
    assert after["partner"] == before["partner"]  # frozen: every parameter as it was
    for name in ("proposer", "checker"):
        moved = {k for k in before[name] if before[name][k] != after[name][k]}
        assert moved and moved <= set(trained[name])  # only what its own trainer trains
    assert set(trained) == {"proposer", "checker"}
    ckpt = run / "checkpoints" / "step-000001" / "trainer" / "policies"
    assert sorted(p.name for p in ckpt.iterdir()) == ["checker", "proposer"]
    assert all((ckpt / n / "policy.safetensors").is_file() for n in ("checker", "proposer"))

    again = make_hub(_config(tmp_path, steps=2), gateway_plugin, torch_plugin, run_dir=run)
    async with again:
        loop = TrainingLoop(again, payloads, run_dir=run, resume=True)
        await loop._restore(again.trainer)
        for name, trainer in again.trainer.trainers.items():
            assert trainer.steps_done == 1
            for key, value in trained[name].items():
                assert torch.equal(trainer.trained[key], value), (name, key)
        assert again.trainer.versions == {"proposer": 1, "checker": 1, "partner": 0}
