"""The README's main job, short: ``rollhub run examples/math/train.toml`` trains the
calculator agent for 2 steps with the embedded torch trainer, then ``rollhub eval`` scores
its checkpoint. Real worker processes, the real gateway and engine, SmolLM2 on the CPU.

Asserted: the weight version advanced, turns of step 2 were sampled by version 1, the
sampler's logprobs are the learner's on every trained step (|KL| < 1e-4) and step 2's
came from the new weights, not the base ones (a weight copy into the engine that silently
did nothing fails here), some episode called the tool through the template's tool syntax
and the tool's reply sits in its record with mask 0, the held-out evaluation ran before
and after, and ``rollhub eval`` wrote its report.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rollhub.export import read_rows
from rollhub_gateway.models import SMOLLM2, load_tokenizer

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
CONFIG = ROOT / "examples" / "math" / "train.toml"
ROLLHUB = Path(sys.executable).parent / "rollhub"

#: a group whose samples all score alike trains nothing: with 8 samples 14-20 % of groups
#: have no signal on this data (docs/benchmarks/training-calc), so both groups of both steps
#: lack it once in 600 to 2,400 runs; with 4 samples a silent first step was seen in CI
N_SAMPLES = 8

SHORT = {
    "ROLLHUB_TRAINING__STEPS": "2",
    "ROLLHUB_TRAINING__BATCH_GROUPS": "2",
    "ROLLHUB_TRAINING__CHECKPOINT_EVERY": "2",
    "ROLLHUB_EXPERIMENT__N_SAMPLES": str(N_SAMPLES),
    "ROLLHUB_EVAL__MAX_PROMPTS": "2",
    "ROLLHUB_EVAL__N_SAMPLES": "2",
    # a learning rate high enough that two steps surely change the weights
    "ROLLHUB_TRAINER__LEARNING_RATE": "1e-4",
    # seeded sampling: the same episodes every run; with this seed both steps have groups
    # with signal, so step 1 trains and step 2 samples new weights
    "ROLLHUB_EXPERIMENT__SEED": "1",
}
T = 0.7  # examples/math/train.toml's sampling temperature


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("mainjob")
    env = {**os.environ, **SHORT, "ROLLHUB_STORE__URL": f'"file://{tmp / "store"}"'}
    out = subprocess.run(
        [str(ROLLHUB), "run", str(CONFIG), "--run-dir", str(tmp / "run"), "--no-progress"],
        env=env, capture_output=True, text=True, timeout=900,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "before / after training" in out.stdout
    assert "step 2/2" in out.stdout
    return tmp / "run"


def test_the_policy_was_trained_and_published(trained: Path) -> None:
    rows = [json.loads(line) for line in (trained / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]
    assert rows[-1]["weight_version"] == 2
    for row in rows:
        for key in ("success_rate", "tool_call_rate", "turns_mean", "trained_tokens",
                    "masked_tokens", "groups_without_signal"):
            assert key in row, key
        # a step whose groups all scored alike leaves the weights as they were
        assert ("sampler_learner_kl" in row) == (row["datums"] > 0), row
        # the trained layers ran on the frozen layers' forward (some of it done while
        # sampling: how much depends on the machine's load)
        assert ("frozen_ahead_frac" in row) == (row["datums"] > 0), row
        assert 0.0 <= row.get("frozen_ahead_frac", 0.0) <= 1.0
    assert any(row["datums"] > 0 for row in rows), rows
    assert (trained / "training.png").stat().st_size > 0
    assert (trained / "checkpoints" / "latest").read_text().strip() == "step-000002"
    assert (trained / "checkpoints" / "step-000002" / "trainer" / "policy.safetensors").exists()


def test_the_sampler_is_the_learner_and_step_two_sampled_the_new_weights(trained: Path) -> None:
    import torch
    from rollhub_gateway.models import load_causal_lm

    rows = [json.loads(line) for line in (trained / "metrics.jsonl").read_text().splitlines()]
    # (seeded: both steps have groups with signal; another seed may need checking again)
    assert all(row["datums"] > 0 for row in rows), rows
    for row in rows:
        if row["datums"]:
            assert abs(row["sampler_learner_kl"]) < 1e-4, row
            assert row["sampler_learner_abs_diff"] < 1e-3, row
    # the same tokens under the base weights: step 2's recorded logprobs must be far from
    # them (the copy into the engine worked) while matching the learner's (above)
    model, _ = load_causal_lm(SMOLLM2)
    diffs = []
    for row in read_rows(trained / "episodes.jsonl"):
        if row["step"] != 1 or row["status"] != "ok":
            continue
        for rec in row["traces"]:
            ids = rec["prompt_ids"] + rec["response_ids"]
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([ids])).logits[0].float() / T
            lps = torch.log_softmax(logits, -1)
            p = len(rec["prompt_ids"])
            for j, (t, m, lp) in enumerate(zip(rec["response_ids"], rec["response_mask"],
                                               rec["response_logprobs"], strict=True)):
                if m:
                    diffs.append(abs(float(lps[p + j - 1, t]) - lp))
    base_diff = sum(diffs) / len(diffs)
    assert base_diff > 10 * max(rows[1]["sampler_learner_abs_diff"], 1e-4), (base_diff, rows[1])


def test_every_episode_is_kept_and_step_two_was_sampled_by_version_one(trained: Path) -> None:
    rows = read_rows(trained / "episodes.jsonl")
    assert len(rows) == 2 * 2 * N_SAMPLES
    assert {r["step"] for r in rows} == {0, 1}
    second = [r for r in rows if r["step"] == 1 and r["status"] == "ok"]
    versions = {t["weight_version"] for r in second for rec in r["traces"] for t in rec["turns"]}
    assert versions == {1}
    first = [r for r in rows if r["step"] == 0 and r["status"] == "ok"]
    assert {t["weight_version"] for r in first for rec in r["traces"] for t in rec["turns"]} == {0}


def test_a_tool_call_whose_result_is_masked_out(trained: Path) -> None:
    tok = load_tokenizer(SMOLLM2)
    found = 0
    for row in read_rows(trained / "episodes.jsonl"):
        for rec in row["traces"]:
            if not any(t["finish_reason"] == "tool_calls" for t in rec["turns"]):
                continue
            sampled = tok.decode([i for i, m in zip(rec["response_ids"], rec["response_mask"],
                                                    strict=True) if m])
            masked = tok.decode([i for i, m in zip(rec["response_ids"], rec["response_mask"],
                                                   strict=True) if not m])
            assert "<tool_call>" in sampled  # the template's tool syntax, sampled
            assert "<|im_start|>tool\n" in masked  # the tool's reply: environment tokens
            found += 1
    assert found, "no episode called the calculator"


def test_the_held_out_set_was_scored_before_and_after(trained: Path) -> None:
    report = json.loads((trained / "eval.json").read_text())
    assert report["before"]["weight_version"] == 0 and report["after"]["weight_version"] == 2
    for side in ("before", "after"):
        assert report[side]["prompts"] == 2 and report[side]["samples"] == 4
        assert 0.0 <= report[side]["pass_at_1"] <= report[side]["pass_at_k"] <= 1.0


def test_rollhub_eval_scores_the_checkpoint(trained: Path, tmp_path: Path) -> None:
    env = {**os.environ, "ROLLHUB_STORE__URL": f'"file://{tmp_path / "store"}"'}
    out = subprocess.run(
        [str(ROLLHUB), "eval", str(CONFIG), "--checkpoint", str(trained), "-n", "2",
         "--max-prompts", "2"],
        env=env, capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    report = json.loads((trained / "eval-step-000002.json").read_text())
    assert report["label"].endswith("step-000002") and report["samples"] == 4
    assert set(report) >= {"pass_at_1", "pass_at_k", "reward_mean", "tool_call_rate", "failures"}
    # the episodes sit beside the report
    kept = read_rows(trained / "eval-step-000002.episodes.jsonl")
    assert len(kept) == 4 and {r["group_id"] for r in kept} == set(report["by_prompt"])
    # and the training run's own episodes are untouched by the evaluation
    assert len(read_rows(trained / "episodes.jsonl")) == 2 * 2 * N_SAMPLES
