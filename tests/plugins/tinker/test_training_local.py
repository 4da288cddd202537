"""Real RL steps against the local Tinker-compatible server (skyrl, JAX on the CPU).

Local agent workers answer arithmetic through the in-process gateway, whose ``tinker``
backend samples from the trainer's sampling client; the ``tinker`` trainer runs
importance-sampling steps on a LoRA of SmolLM2-135M. Checked: the version advances, turns
after a step are sampled by the new client and tagged with the new version, each Datum's
targets are the sampled tokens shifted by one, and the update raises the logprob of a
positively-advantaged completion.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import rollhub_gateway.plugin
import rollhub_tinker.plugin
from rollhub.testing import make_hub
from rollhub.training.loop import TrainingLoop
from rollhub_tinker.datums import episode_datums, to_tinker

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
AGENT = ROOT / "examples" / "math" / "arith_agent.py"


def _config(tmp_path: Path, base_url: str) -> dict[str, Any]:
    return {
        "experiment": {
            "name": "tinker-e2e",
            "n_samples": 4,
            "concurrency": 8,
            "timeout_s": 240,
            "progress": False,
            "seed": 5,
            "sampling": {"temperature": 1.0, "max_tokens": 8},
        },
        "runtime": {"name": "local", "app": f"{AGENT}:app", "workers": 1},
        "store": {"url": f"file://{tmp_path / 'store'}"},
        "token_source": {
            "name": "gateway",
            "model": "smollm2-135m-instruct",
            "engine": {"name": "tinker", "options": {"from_trainer": True}},
        },
        "trainer": {
            "name": "tinker",
            "base_url": base_url,
            "lora_rank": 8,
            "learning_rate": 2e-3,
            "loss_fn": "importance_sampling",
        },
        "training": {"batch_groups": 2, "steps": 2, "checkpoint_every": 1, "shuffle": False},
    }


async def _sampled_logprobs(trainer: Any, arrays: list[Any]) -> list[float]:
    """Per Datum: the learner's summed logprob of its sampled tokens under current weights."""
    fut = await trainer.training_client.forward_async([to_tinker(a) for a in arrays],
                                                      "cross_entropy")
    out = await fut.result_async()
    return [
        sum(lp for lp, adv in zip(o["logprobs"].tolist(), a.advantages, strict=True) if adv)
        for o, a in zip(out.loss_fn_outputs, arrays, strict=True)
    ]


async def test_two_real_training_steps(tmp_path, tinker_server_factory, caplog):
    caplog.set_level(logging.INFO, logger="rollhub_tinker.trainer")
    server = tinker_server_factory()
    try:
        await _train_resume_and_check(tmp_path, server)
    finally:
        server.stop()  # 4-5 GB back for the rest of the suite
    # step 1's checkpoint went when step 3's was written (keep_checkpoints = 2), and its
    # state was asked to go too: the local server deletes none, and the run went on
    assert "step-000001" not in {p.name for p in (tmp_path / "run" / "checkpoints").iterdir()}
    assert "stays: the service holds no such state or deletes none (404)" in caplog.text


async def _train_resume_and_check(tmp_path: Path, server: Any) -> None:
    payloads = [
        {"id": f"q{i}", "question": f"What is {i} + {i + 3}?", "answer": 2 * i + 3}
        for i in range(1, 5)
    ]
    hub = make_hub(
        _config(tmp_path, server.base_url),
        rollhub_gateway.plugin,
        rollhub_tinker.plugin,
        run_dir=tmp_path / "run",
    )
    seen: list[dict[str, Any]] = []
    async with hub:
        trainer = hub.trainer
        backend = hub.token_source.gateway.backend
        real_step = trainer.step

        async def observed_step(batch):
            clients_before = backend.sampling_client
            arrays, _ = episode_datums(batch.trainable())
            assert any(max(a.advantages) > 0 for a in arrays), "no positive advantage"
            before = await _sampled_logprobs(trainer, arrays)
            result = await real_step(batch)
            after = await _sampled_logprobs(trainer, arrays)
            seen.append(
                {
                    "batch": batch,
                    "arrays": arrays,
                    "result": result,
                    "client_before": clients_before,
                    "before": before,
                    "after": after,
                }
            )
            return result

        trainer.step = observed_step
        summary = await TrainingLoop(hub, payloads, run_dir=tmp_path / "run").run()
        final_client = backend.sampling_client

    assert summary["steps"] == 2 and summary["weight_version"] == 2
    first, second = seen
    # step 1's policy went to the gateway before step 2 sampled, and step 2's turns carry v1
    assert second["client_before"] is first["result"].policy
    assert final_client is second["result"].policy
    for step, record in enumerate(seen):
        versions = {
            t.weight_version
            for e in record["batch"].episodes
            for rec in e.traces
            for t in rec.turns
        }
        assert versions == {step}
        assert record["batch"].weight_version == step
    # every Datum's targets are the sampled tokens shifted by one
    for record in seen:
        by_id = {e.episode_id: e for e in record["batch"].episodes}
        for arrays in record["arrays"]:
            (rec,) = by_id[arrays.episode_id].traces
            full = rec.prompt_ids + rec.response_ids
            assert arrays.model_input == full[:-1] and arrays.target_tokens == full[1:]
            sampled = [j for j, a in enumerate(arrays.advantages) if a]
            assert [arrays.target_tokens[j] for j in sampled] == rec.response_ids
            assert [arrays.logprobs[j] for j in sampled] == rec.response_logprobs
    # the update is real: the objective it ascends (Σ advantage · logprob) rose, and a
    # positively-advantaged completion became more likely (completions that share tokens
    # with negatively-advantaged ones may move less, so not every one is checked)
    advs = [max(a.advantages, key=abs) for a in first["arrays"]]
    objective = [sum(v * lp for v, lp in zip(advs, first[k], strict=True))
                 for k in ("before", "after")]
    assert objective[1] > objective[0], objective
    gains = [a - b for a, b, v in zip(first["after"], first["before"], advs, strict=True) if v > 0]
    assert max(gains) > 0.05, gains
    assert (tmp_path / "run" / "checkpoints" / "latest").read_text() == "step-000002"

    # resume: the server restores weights and optimizer from the saved state, and the run
    # goes on at step 2 with version 2
    cfg = _config(tmp_path, server.base_url)
    cfg["training"].update(steps=3, epochs=2)  # epoch 1 starts at step 2
    hub = make_hub(cfg, rollhub_gateway.plugin, rollhub_tinker.plugin, run_dir=tmp_path / "run")
    async with hub:
        summary = await TrainingLoop(hub, payloads, run_dir=tmp_path / "run", resume=True).run()
        resumed = hub.trainer
    assert resumed.steps_done == 3 and summary["weight_version"] == 3
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    # step 2 was sampled by the restored weights, published as version 2
    assert rows[2]["weight_version"] == 3 and rows[2]["staleness_max"] == 0
    state = tmp_path / "run" / "checkpoints" / "step-000002" / "trainer" / "tinker_path.txt"
    assert state.read_text().startswith("tinker://")
