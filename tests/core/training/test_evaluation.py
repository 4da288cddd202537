"""Scoring held-out prompts, the before/after table and ``rollhub eval``'s arguments."""

from __future__ import annotations

import argparse
import asyncio
import json
import tomllib

import pytest
from rollhub.commands.eval import evaluated_config, resolve_checkpoint
from rollhub.config import parse_config
from rollhub.episode import Episode, ErrorInfo
from rollhub.errors import ConfigError, UsageError
from rollhub.runs.evaluation import EvalReport, summarize_episodes
from rollhub.trace import TraceRecord, TurnSpan
from rollhub.training import TrainingBatch
from rollhub.training.before_after import before_after_rows
from rollhub.training.loop import batch_metrics


def _episode(i: int, reward: float | None, *, tool: bool = False, status: str = "ok",
             success: bool | None = None) -> Episode:
    turns = [TurnSpan(turn_index=0, start=0, end=2, finish_reason="tool_calls" if tool else "stop")]
    mask = [1, 1]
    if tool:  # a tool reply (3 tokens) and a second turn
        turns.append(TurnSpan(turn_index=1, start=5, end=6, finish_reason="stop"))
        mask = [1, 1, 0, 0, 0, 1]
    record = TraceRecord(session_id=f"s{i}", prompt_ids=[1, 2], response_ids=list(range(len(mask))),
                         response_mask=mask, response_logprobs=[-0.1 * m for m in mask],
                         turns=turns)
    result = {} if success is None else {"success": success}
    return Episode(f"e{i}", "g", f"s{i}", i, status, result=result, reward=reward,
                   traces=[record] if status == "ok" else [],
                   error=None if status == "ok" else ErrorInfo("Boom", "agent failed"))


def test_summary_counts_failures_as_unsolved_and_reports_tool_use() -> None:
    by_prompt = {
        "p1": [_episode(0, 1.0, tool=True), _episode(1, 0.0)],
        "p2": [_episode(2, 0.0, tool=True), _episode(3, None, status="agent_error")],
    }
    report = summarize_episodes("base", by_prompt, k=2, weight_version=0)
    assert report.prompts == 2 and report.samples == 4
    assert report.pass_at_1 == pytest.approx(0.25)  # p1: 1 of 2, p2: 0 of 2
    assert report.pass_at_k == pytest.approx(0.5)  # p1 solved within 2, p2 not
    assert report.reward_mean == pytest.approx(1 / 3, abs=1e-3)
    assert report.tool_call_rate == pytest.approx(2 / 3, abs=1e-3)  # of the 3 that ran
    assert report.turns_mean == pytest.approx(5 / 3, abs=1e-3)
    assert report.failures == {"agent_error:Boom": 1}


def test_an_agent_reported_success_wins_over_the_reward() -> None:
    report = summarize_episodes("x", {"p": [_episode(0, 0.5, success=True)]}, k=1)
    assert report.pass_at_1 == 1.0
    report = summarize_episodes("x", {"p": [_episode(0, 1.0, success=False)]}, k=1)
    assert report.pass_at_1 == 0.0


def test_success_follows_the_configured_threshold() -> None:
    # no flag from the agent: the reward decides, at [rewards] success_threshold
    half = {"p": [_episode(0, 0.5), _episode(1, 0.2)]}
    assert summarize_episodes("x", half, k=2).pass_at_1 == 0.0
    assert summarize_episodes("x", half, k=2, success_threshold=0.5).pass_at_1 == 0.5
    from rollhub.episode import EpisodeGroup

    batch = TrainingBatch(0, [EpisodeGroup("g", {}, half["p"])], {}, 0)
    assert batch_metrics(batch)["success_rate"] == 0.0
    assert batch_metrics(batch, success_threshold=0.5)["success_rate"] == 0.5


def test_batch_metrics_count_success_tool_calls_turns_and_masked_tokens() -> None:
    from rollhub.episode import EpisodeGroup

    eps = [_episode(0, 1.0, tool=True), _episode(1, 0.0), _episode(2, None, status="timeout")]
    batch = TrainingBatch(0, [EpisodeGroup("g", {}, eps)], {"e0": 1.0, "e1": -1.0}, 0)
    m = batch_metrics(batch)
    # the timeout counts as not solved (as in evaluation); tool calls and turns: ok episodes
    assert m["success_rate"] == 0.3333 and m["tool_call_rate"] == 0.5 and m["turns_mean"] == 1.5
    assert m["masked_tokens"] == 3  # the tool reply of e0


def test_before_after_rows_compare_first_and_last_steps_and_the_evals() -> None:
    history = [{"reward_mean": r, "success_rate": r, "tool_call_rate": 0.5, "turns_mean": 1.5}
               for r in (0.1, 0.2, 0.3, 0.7, 0.8, 0.9)]
    report = EvalReport("base", 4, 8, 2, 0.25, 0.5, 0.25, 0.5, 1.5, pass_at_1_ci=(0.07, 0.59),
                        splits={"depth-2": {"prompts": 2, "pass_at_1": 0.5,
                                            "pass_at_1_ci": (0.15, 0.85)}})
    after = EvalReport("step 6", 4, 8, 2, 0.75, 1.0, 0.75, 1.0, 2.0, pass_at_1_ci=(0.41, 0.93))
    rows = before_after_rows(history, report, after)
    by_metric = {(section.split(":")[0], metric): (b, a) for section, metric, b, a in rows}
    assert by_metric[("training", "reward")] == ("0.200", "0.800")
    assert by_metric[("held-out eval (4 prompts × 2)", "pass@1")] == (
        "0.250 [0.07, 0.59]", "0.750 [0.41, 0.93]")
    assert by_metric[("held-out eval (4 prompts × 2)", "reward")] == ("0.250", "0.750")
    assert by_metric[("held-out depth-2 (2 prompts)", "pass@1")] == ("0.500 [0.15, 0.85]", "-")
    assert before_after_rows([], None, None) == []


def _args(**kw) -> argparse.Namespace:
    base = dict(dataset=None, n_samples=None, max_prompts=None, base_url=None, model_id=None,
                checkpoint=None)
    return argparse.Namespace(**{**base, **kw})


def _config(tmp_path, eval_section: str = 'dataset = "held.jsonl"'):
    return parse_config(tomllib.loads(f"""
[token_source]
name = "gateway"
engine = {{ name = "transformers" }}
[trainer]
name = "torch"
learning_rate = 1e-5
[eval]
{eval_section}
"""), env={}, base_dir=tmp_path)


def test_eval_needs_held_out_prompts(tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"\[eval\] dataset") as err:
        evaluated_config(_config(tmp_path, ""), _args())
    assert err.value.field == "eval.dataset"


def test_eval_of_a_checkpoint_loads_its_weights_into_the_engine(tmp_path) -> None:
    from rollhub.training.checkpoint import Checkpoint, write_checkpoint

    async def save(directory):  # what the torch trainer's save_state leaves
        (directory / "policy.safetensors").write_bytes(b"x")
        return {"steps_done": 4}

    step = asyncio.run(write_checkpoint(tmp_path / "run" / "checkpoints",
                                        Checkpoint(4, 4, "1:abc"), save))
    assert step.name == "step-000004"
    assert resolve_checkpoint(tmp_path / "run") == step
    assert resolve_checkpoint(step) == step
    cfg, label = evaluated_config(_config(tmp_path), _args(checkpoint=str(tmp_path / "run")))
    assert label == str(step) and cfg.trainer.name == "export"
    engine = cfg.token_source.options["engine"]
    assert engine["options"]["weights"] == str(step / "trainer" / "policy.safetensors")
    with pytest.raises(UsageError, match="no trained parameters"):
        resolve_checkpoint(tmp_path)


def test_a_checkpoint_of_another_model_is_refused(tmp_path) -> None:
    # trained layers of one model loaded over another of the same shape would score a
    # model nobody trained
    from rollhub.training.checkpoint import Checkpoint, write_checkpoint

    async def save(directory):
        (directory / "policy.safetensors").write_bytes(b"x")
        (directory / "model.json").write_text(json.dumps({"model": str(tmp_path / "other")}))
        return {"steps_done": 1}

    asyncio.run(write_checkpoint(tmp_path / "run" / "checkpoints", Checkpoint(1, 1, "1:a"), save))
    with pytest.raises(ConfigError, match="trained") as err:
        evaluated_config(_config(tmp_path), _args(checkpoint=str(tmp_path / "run")))
    assert str(tmp_path / "other") in str(err.value) and "smollm2-135m-instruct" in str(err.value)
    trainer = tmp_path / "run" / "checkpoints" / "step-000001" / "trainer"
    (trainer / "model.json").write_text(json.dumps({"model": "smollm2-135m-instruct"}))
    evaluated_config(_config(tmp_path), _args(checkpoint=str(tmp_path / "run")))
    # a run of several policies records each policy's model under trainer/policies/NAME
    (trainer / "model.json").unlink()
    (trainer / "policies" / "checker").mkdir(parents=True)
    (trainer / "policies" / "checker" / "model.json").write_text(json.dumps({"model": "/m2"}))
    with pytest.raises(ConfigError, match=r"'/m2' \(checker\)"):
        evaluated_config(_config(tmp_path), _args(checkpoint=str(tmp_path / "run")))


def test_only_the_newest_checkpoints_are_kept_and_eval_finds_the_last(tmp_path) -> None:
    from rollhub.training.checkpoint import Checkpoint, latest_checkpoint, write_checkpoint

    async def save(directory):
        (directory / "policy.safetensors").write_bytes(b"x")
        return {}

    root = tmp_path / "run" / "checkpoints"
    for steps in (2, 4, 6):
        asyncio.run(write_checkpoint(root, Checkpoint(steps, steps, "1:abc"), save, keep=2))
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step-000004", "step-000006"]
    last = latest_checkpoint(tmp_path / "run")
    assert last is not None and last.steps_done == 6
    assert resolve_checkpoint(tmp_path / "run") == root / "step-000006"
    asyncio.run(write_checkpoint(root, Checkpoint(8, 8, "1:abc"), save, keep=1))
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step-000008"]


def test_a_state_the_trainer_cannot_free_is_logged_and_the_checkpoint_still_written(
    tmp_path, caplog
) -> None:
    from rollhub.training.checkpoint import Checkpoint, write_checkpoint

    dropped = []

    async def save(directory):
        return {"stored": f"service://{len(list(root.glob('step-*')))}"}

    async def drop(state):
        dropped.append(state)
        raise RuntimeError("the service answered 404")

    root = tmp_path / "run" / "checkpoints"
    for steps in (1, 2):
        asyncio.run(write_checkpoint(root, Checkpoint(steps, steps, "1:abc"), save, keep=1,
                                     drop_trainer=drop))
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step-000002"]
    assert dropped == [{"stored": "service://0"}]
    assert "could not free the state of deleted checkpoint" in caplog.text
    assert "the service answered 404" in caplog.text


def test_eval_of_an_endpoint_needs_its_model_name(tmp_path) -> None:
    with pytest.raises(UsageError, match="--model-id"):
        evaluated_config(_config(tmp_path), _args(base_url="http://127.0.0.1:9/v1"))
    cfg, label = evaluated_config(
        _config(tmp_path), _args(base_url="http://127.0.0.1:9/v1", model_id="m", n_samples=3)
    )
    assert cfg.token_source.name == "none" and label == "m" and cfg.eval.n_samples == 3


def _split_episode(i: int, split: str, solved: bool) -> Episode:
    e = _episode(i, 1.0 if solved else 0.0)
    e.payload = {"split": split}
    return e


def test_reports_carry_95_percent_intervals_and_per_split_figures() -> None:
    by_prompt = {
        f"a{p}": [_split_episode(4 * p + j, "depth-1", j < 3) for j in range(4)] for p in range(5)
    } | {
        f"b{p}": [_split_episode(100 + 4 * p + j, "depth-2", j < 1) for j in range(4)]
        for p in range(5)
    }
    report = summarize_episodes("x", by_prompt, k=4)
    assert report.pass_at_1 == pytest.approx(0.5)
    lo, hi = report.pass_at_1_ci
    assert 0.34 < lo < 0.5 < hi < 0.66  # Wilson, 20 of 40
    assert set(report.splits) == {"depth-1", "depth-2"}
    d1, d2 = report.splits["depth-1"], report.splits["depth-2"]
    assert (d1["prompts"], d1["samples"], d1["pass_at_1"]) == (5, 20, 0.75)
    assert d2["pass_at_1"] == 0.25 and d2["pass_at_1_ci"][1] < d1["pass_at_1_ci"][1]
    # every prompt scored alike within its split: resampling prompts cannot move the mean
    assert d1["reward_mean_ci"] == (0.75, 0.75)
    r_lo, r_hi = report.reward_mean_ci
    assert r_lo < 0.5 < r_hi
    assert report.by_prompt["a0"] == {"split": "depth-1", "solved": [1, 1, 1, 0],
                                      "rewards": [1.0, 1.0, 1.0, 0.0]}
    # no split field: no splits
    assert summarize_episodes("x", by_prompt, k=4, split_field=None).splits == {}


def test_pass_at_1_intervals_resample_prompts_not_samples() -> None:
    from rollhub.runs.evaluation import pass_at_1_interval
    from rollhub.runs.intervals import wilson

    # 3 prompts every sample solves, 7 none solves: 100 samples, but only 10 prompts'
    # worth of evidence; an interval over independent samples would claim far more
    clustered = [[1] * 10] * 3 + [[0] * 10] * 7
    lo, hi = pass_at_1_interval(clustered)
    w_lo, w_hi = wilson(30, 100)
    assert lo <= w_lo and hi >= w_hi
    assert hi - lo > 2 * (w_hi - w_lo)
    # independent-looking samples: the bootstrap is no wider, Wilson's interval stands
    mixed = [[1, 0, 1, 0, 0, 1, 0, 0, 0, 0]] * 10
    assert pass_at_1_interval(mixed) == pytest.approx(wilson(30, 100))
    assert pass_at_1_interval([[1, 0, 1]]) == wilson(2, 3)  # one prompt: nothing to resample
