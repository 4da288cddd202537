"""Two real TRL GRPO steps on SmolLM2 from multi-turn calculator episodes.

``examples/math/train-trl.toml`` shortened (2 steps of 2 prompts × 4 samples, a checkpoint
after each), run in this process the way ``rollhub run`` runs it: real agent worker
processes, the in-process gateway, the transformers engine sampling from TRL's own model,
TRL's ``GRPOTrainer``.

Asserted: TRL changed the trained weights (and only those); a completion with a positive
advantage became more likely; the tensors TRL's loss was computed on hold exactly the ids
the gateway recorded, and its tool mask is exactly the records' mask (tool replies 0);
turns of step 2 carry weight version 1; the engine sampled from TRL's module itself; the
run kept ``training.keep_checkpoints`` of TRL's checkpoints, each holding the trained
layers (not the whole model), which over the base model give the trained model exactly,
and which ``rollhub eval --checkpoint RUN_DIR`` scores.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from rollhub.commands.checks import check_run_config, load_payloads
from rollhub.commands.run_training import train
from rollhub.config import load_config
from rollhub.export import read_rows
from rollhub.hubs.async_hub import AsyncHub
from rollhub_gateway.models import SMOLLM2, load_causal_lm, load_tokenizer, train_top_layers
from rollhub_trl.trained_weights import POLICY_FILE, load_trained
from safetensors.torch import load_file

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
CONFIG = ROOT / "examples" / "math" / "train-trl.toml"
T = 0.7

SHORT = {
    "ROLLHUB_TRAINING__STEPS": "2",
    "ROLLHUB_TRAINING__BATCH_GROUPS": "2",
    # TRL saves after each step and keeps the newest checkpoint only
    "ROLLHUB_TRAINING__CHECKPOINT_EVERY": "1",
    "ROLLHUB_TRAINING__KEEP_CHECKPOINTS": "1",
    "ROLLHUB_EXPERIMENT__N_SAMPLES": "4",
    "ROLLHUB_EVAL__MAX_PROMPTS": "2",
    "ROLLHUB_EVAL__N_SAMPLES": "2",
    # high enough that two steps surely move the weights
    "ROLLHUB_TRAINER__LEARNING_RATE": "1e-4",
}


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("trl")
    with pytest.MonkeyPatch.context() as mp:
        for key, value in {**SHORT, "ROLLHUB_STORE__URL": f'"file://{tmp / "store"}"'}.items():
            mp.setenv(key, value)
        cfg = load_config(CONFIG)
    cfg.experiment.progress = False
    host = check_run_config(cfg)
    payloads = load_payloads(cfg)
    run_dir = tmp / "run"
    run_dir.mkdir()
    hub = AsyncHub(cfg, host=host, run_dir=run_dir)
    engines: list[Any] = []
    rose: list[float] = []

    async def go() -> dict[str, Any]:
        original = hub.publish_policy

        async def spy(policy: Any, version: int) -> None:
            # what the engine samples from when the next policy arrives, and that policy
            engines.append((hub.token_source.gateway.backend.engine.model, policy, version))
            # right after each optimizer step, before the next: the batch it just trained on.
            # Every step, not only the first: a step whose groups all scored alike has no
            # positive advantage (about one run in sixteen for the first step alone).
            if version >= 1 and hub.trainer.rollout.pending:
                batch = hub.trainer.rollout.pending[0].batch
                for e, advantage in batch.trainable():
                    if advantage > 0 and e.traces:
                        rose.append(_gain(policy, e.traces[-1].model_dump()))
            await original(policy, version)

        hub.publish_policy = spy  # type: ignore[method-assign]
        return await train(hub, payloads, run_dir, resume=False)

    summary = asyncio.run(go())
    trl = hub.trainer.trl_trainer
    return {"summary": summary, "dir": run_dir, "trl": trl, "engines": engines, "rose": rose}


def test_trl_stepped_twice_and_the_engine_sampled_from_its_module(run: dict[str, Any]) -> None:
    trl = run["trl"]
    assert run["summary"]["steps"] == 2 and trl.state.global_step == 2
    published = run["engines"]
    assert [v for _, _, v in published] == [0, 1, 2]
    assert all(policy is trl.model for _, policy, _ in published)  # the module, not a copy
    # the episodes of steps 1 and 2 were sampled by TRL's module itself
    assert all(engine is trl.model for engine, _, _ in published[1:])
    rows = [json.loads(line) for line in (run["dir"] / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]
    assert [r["weight_version"] for r in rows] == [1, 2]
    for key in ("loss", "grad_norm", "reward_mean", "success_rate", "tool_call_rate",
                "trained_tokens", "masked_tokens", "trl_records_dropped"):
        assert key in rows[0], key
    assert (run["dir"] / "training.png").stat().st_size > 0
    assert json.loads((run["dir"] / "eval.json").read_text())["after"]["weight_version"] == 2


def test_the_run_keeps_training_keep_checkpoints_of_trls_checkpoints(
    run: dict[str, Any],
) -> None:
    kept = sorted(p.name for p in (run["dir"] / "trl").glob("checkpoint-*"))
    assert kept == ["checkpoint-2"]  # step 1's was deleted once step 2's was saved


def test_a_checkpoint_holds_the_trained_layers_and_resumes_them(run: dict[str, Any]) -> None:
    folder = run["dir"] / "trl" / "checkpoint-2"
    assert not list(folder.glob("model*.safetensors"))  # not TRL's full save of the model
    assert (folder / "optimizer.pt").is_file() and (folder / "trainer_state.json").is_file()
    final = run["trl"].model
    trained = {n for n, p in final.named_parameters() if p.requires_grad}
    assert set(load_file(str(folder / POLICY_FILE))) == trained
    full = sum(p.numel() for p in final.parameters()) * 4
    assert (folder / POLICY_FILE).stat().st_size < full / 3
    # the base model plus the checkpoint is the trained model, every parameter exactly
    resumed, _ = load_causal_lm(SMOLLM2)
    train_top_layers(resumed, 8)
    assert load_trained(folder, resumed, SMOLLM2, 8)
    for (name, a), b in zip(final.named_parameters(), resumed.parameters(), strict=True):
        assert torch.equal(a.detach(), b.detach()), name


def test_only_the_trained_layers_changed(run: dict[str, Any]) -> None:
    base, _ = load_causal_lm(SMOLLM2)
    before = dict(base.named_parameters())
    changed = {
        name for name, p in run["trl"].model.named_parameters()
        if not torch.equal(p.detach(), before[name].detach())
    }
    assert changed, "TRL's steps changed no weight"
    assert all(".layers.2" in n or "model.norm" in n for n in changed), sorted(changed)[:5]
    assert "model.embed_tokens.weight" not in changed


def _gain(model: Any, record: dict[str, Any]) -> float:
    """log p(the record's sampled tokens) under ``model`` minus under the sampler."""
    full = torch.tensor([record["prompt_ids"] + record["response_ids"]])
    with torch.no_grad():
        lps = torch.log_softmax(model(input_ids=full).logits[0].float() / T, -1)
    p = len(record["prompt_ids"])
    now = sum(
        float(lps[p + j - 1, t])
        for j, (t, m) in enumerate(zip(record["response_ids"], record["response_mask"], strict=True))
        if m
    )
    sampler = sum(lp for lp, m in zip(record["response_logprobs"], record["response_mask"],
                                      strict=True) if m)
    return now - sampler


def test_a_positively_advantaged_completion_became_more_likely(run: dict[str, Any]) -> None:
    gains = run["rose"]  # completions with advantage > 0, after the update they trained
    assert gains, "no completion of either step had a positive advantage"
    assert sum(gains) / len(gains) > 0, gains


def test_trls_loss_saw_exactly_the_sampled_ids_and_the_records_mask(run: dict[str, Any]) -> None:
    scored = run["trl"].last_scored  # what TRL's loss consumed in step 2
    second = [r for r in read_rows(run["dir"] / "episodes.jsonl") if r["step"] == 1]
    assert len(second) == scored["completion_ids"].shape[0] == 8
    by_id = {r["episode_id"]: r for r in second}
    order = [by_id[i] for i in run["trl"].rollout_order]
    tok = load_tokenizer(SMOLLM2)
    tool_replies = 0
    for i, row in enumerate(order):
        rec = row["traces"][-1]
        n = int(scored["completion_mask"][i].sum())
        completion = scored["completion_ids"][i, :n].tolist()
        prompt = scored["prompt_ids"][i][scored["prompt_mask"][i].bool()].tolist()
        mask = scored["tool_mask"][i, :n].tolist()
        assert completion == rec["response_ids"]
        assert prompt == rec["prompt_ids"]
        assert mask == rec["response_mask"]
        masked = tok.decode([t for t, m in zip(completion, mask, strict=True) if not m])
        if "<|im_start|>tool\n" in masked:
            tool_replies += 1
            sampled = tok.decode([t for t, m in zip(completion, mask, strict=True) if m])
            assert "<tool_call>" in sampled and "<|im_start|>tool" not in sampled
    assert tool_replies, "no episode of step 2 got a tool reply"


def test_turns_of_step_two_carry_version_one(run: dict[str, Any]) -> None:
    rows = read_rows(run["dir"] / "episodes.jsonl")
    for step, version in ((0, 0), (1, 1)):
        ok = [r for r in rows if r["step"] == step and r["status"] == "ok"]
        assert ok
        assert {t["weight_version"] for r in ok for rec in r["traces"] for t in rec["turns"]} == {
            version
        }


def test_trl_trains_on_the_cores_advantages_and_its_sampler_is_its_learner(
    run: dict[str, Any],
) -> None:
    from rollhub.episode import Episode, EpisodeGroup
    from rollhub.training.advantages import group_advantages

    rows = [json.loads(line) for line in (run["dir"] / "metrics.jsonl").read_text().splitlines()]
    for row in rows:  # the engine sampled from TRL's weights as they were: ratio 1
        assert abs(row["sampler_learner_kl"]) < 1e-4, row
        assert row["sampler_learner_abs_diff"] < 1e-3, row
    # the advantages TRL's loss used in step 2 are the core's grpo estimate (population
    # std, 1e-6), not TRL's own (Bessel-corrected std, 1e-4)
    second = [r for r in read_rows(run["dir"] / "episodes.jsonl") if r["step"] == 1]
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in second:
        groups.setdefault(r["group_id"], []).append(r)
    expected: dict[str, float] = {}
    for gid, members in groups.items():
        episodes = [Episode(r["episode_id"], gid, r["session_id"], r["sample_index"],
                            r["status"], reward=r["reward"], trainable=r["trainable"])
                    for r in members]
        expected.update(group_advantages(EpisodeGroup(gid, {}, episodes), "grpo"))
    used = run["trl"].last_scored["advantages"].tolist()
    order = run["trl"].rollout_order
    assert used == pytest.approx([expected.get(eid, 0.0) for eid in order], abs=1e-6)
    assert any(abs(a) > 0 for a in used)


def test_rollhub_eval_scores_trls_checkpoint(run: dict[str, Any], tmp_path: Path) -> None:
    rollhub = Path(sys.executable).with_name("rollhub")
    env = {**os.environ, "ROLLHUB_STORE__URL": f'"file://{tmp_path / "store"}"'}
    out = subprocess.run(
        [str(rollhub), "eval", str(CONFIG), "--checkpoint", str(run["dir"]), "-n", "1",
         "--max-prompts", "1"],
        env=env, capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    report = json.loads((run["dir"] / "eval-checkpoint-2.json").read_text())
    assert report["label"] == str(run["dir"] / "trl" / "checkpoint-2")
    assert report["samples"] == 1 and not report["failures"]
