"""Each policy's view of the episodes: only those it takes part in train and score it.

An episode whose records are all other policies' (the agent never called this one there)
stays out of its baseline, its per-step figures, its held-out figures and ``rollhub
compare --policy``; an imputed failure (``on_failure = "zero_reward"``) penalises a keyed
policy as it does a run of one; a frozen policy that sampled nothing has no figures; the
run's staleness is weighted by turns."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rollhub.episode import Episode, EpisodeGroup
from rollhub.policies import PolicyConfig, policy_episode
from rollhub.runs.comparison import summarize_run
from rollhub.runs.evaluation import summarize_episodes
from rollhub.scoring.rewards import apply_failure_policy
from rollhub.trace import TraceRecord, TurnSpan
from rollhub.training.batch_metrics import batch_metrics
from rollhub.training.policy_trainer import PolicyTrainers, policy_batch
from rollhub.training.roles import PolicyTrainer
from rollhub.training.step import StepResult, TrainingBatch

CHECKER = PolicyConfig(name="checker", reward_key="verdict")


def _record(policy: str, turns: int = 1, version: int = 0) -> TraceRecord:
    """A record of ``policy`` with ``turns`` one-token turns sampled at ``version``."""
    return TraceRecord(
        session_id="s",
        prompt_ids=[1],
        response_ids=[2] * turns,
        response_mask=[1] * turns,
        response_logprobs=[-0.1] * turns,
        policy=policy,
        turns=[
            TurnSpan(turn_index=i, start=i, end=i + 1, weight_version=version, policy=policy)
            for i in range(turns)
        ],
    )


def _episode(i: int, verdict: float | None, *, checker_ran: bool) -> Episode:
    """The proposer always samples; the checker only when ``checker_ran``."""
    components = {"solved": 0.0} if verdict is None else {"solved": 0.0, "verdict": verdict}
    return Episode(
        f"e{i}",
        "g",
        f"s{i}",
        i,
        "ok",
        result={},
        reward=verdict or 0.0,
        reward_components=components,
        weight_version=0,
        traces=[_record("proposer")] + ([_record("checker")] if checker_ran else []),
    )


def test_zero_reward_imputes_a_keyed_policys_reward_too() -> None:
    ok = [
        Episode(
            f"e{i}",
            "g",
            f"s{i}",
            i,
            "ok",
            result={},
            reward=1.0,
            reward_components={"solved": 1.0},
            traces=[_record("proposer")],
        )
        for i in range(3)
    ]
    failed = Episode("e3", "g", "s3", 3, "agent_error", result=None)  # its turns were dropped
    group = EpisodeGroup("g", {}, [*ok, failed])
    apply_failure_policy(group, "zero_reward")
    batch = TrainingBatch(0, [group], {}, 0)
    keyed = policy_batch(batch, PolicyConfig(name="proposer", reward_key="solved"), 0, "grpo")
    single = policy_batch(batch, PolicyConfig(name="proposer"), 0, "grpo")
    view = policy_episode(failed, PolicyConfig(name="proposer", reward_key="solved"))
    assert view.reward == 0.0 and view.trainable
    assert keyed.advantages == pytest.approx(single.advantages)
    assert keyed.advantages["e3"] < 0 < keyed.advantages["e0"]


def test_a_policys_baseline_and_figures_leave_out_episodes_it_sampled_nothing_in() -> None:
    eps = [
        _episode(0, 1.0, checker_ran=True),
        _episode(1, 0.0, checker_ran=True),
        _episode(2, 0.0, checker_ran=False),
        _episode(3, 0.0, checker_ran=False),
    ]
    batch = TrainingBatch(0, [EpisodeGroup("g", {}, eps)], {}, 0)
    sub = policy_batch(batch, CHECKER, 0, "grpo")
    assert sub.advantages == pytest.approx({"e0": 1.0, "e1": -1.0}, rel=1e-4)
    figures = batch_metrics(sub, 1.0)
    assert figures["success_rate"] == 0.5 and figures["episodes_trained"] == 2
    # the proposer sampled in all four: its view keeps them
    proposer = policy_batch(batch, PolicyConfig(name="proposer"), 0, "grpo")
    assert len(proposer.episodes) == 4 and not policy_episode(eps[2], CHECKER).trainable


def test_eval_scores_a_policy_only_where_it_sampled_and_was_rewarded() -> None:
    by_prompt = {
        "p0": [_episode(0, 1.0, checker_ran=True), _episode(1, 0.0, checker_ran=True)],
        "p1": [_episode(2, None, checker_ran=False), _episode(3, None, checker_ran=False)],
    }
    report = summarize_episodes("x", by_prompt, 2, policies=[CHECKER])
    checker = report.policies["checker"]
    assert checker["samples"] == 2 and checker["pass_at_1"] == 0.5
    assert checker["reward_mean"] == 0.5 and checker["by_prompt"]["p1"]["solved"] == []
    # no records at all (no token capture): an ok episode lacking the key is not scored
    bare = {
        "p0": [
            Episode(
                "e0", "p0", "s0", 0, "ok", result={}, reward=1.0, reward_components={"verdict": 1.0}
            ),
            Episode(
                "e1", "p0", "s1", 1, "ok", result={}, reward=0.0, reward_components={"solved": 0.0}
            ),
        ]
    }
    checker = summarize_episodes("x", bare, 2, policies=[CHECKER]).policies["checker"]
    assert (checker["samples"], checker["pass_at_1"], checker["reward_mean"]) == (1, 1.0, 1.0)


def test_eval_has_no_figures_for_a_frozen_policy_that_sampled_nothing() -> None:
    eps = [
        Episode(
            f"e{i}",
            "p0",
            f"s{i}",
            i,
            "ok",
            result={"success": i == 0},
            reward=float(i == 0),
            reward_components={"solved": float(i == 0), "judge": 0.5},
            traces=[_record("proposer")],
        )
        for i in range(2)
    ]
    policies = [
        PolicyConfig(name="proposer", reward_key="solved"),
        PolicyConfig(name="judge", trainable=False),
        PolicyConfig(name="partner", trainable=False, reward_key="judge"),
    ]
    report = summarize_episodes("x", {"p0": eps}, 2, policies=policies)
    assert set(report.policies) == {"proposer", "partner"}  # the judge: none
    assert report.policies["partner"]["samples"] == 0  # keyed, but it sampled in none


def test_compare_counts_a_policys_success_only_where_it_sampled(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(
        json.dumps(
            {
                "policies": [
                    {"name": "proposer", "reward_key": "solved"},
                    {"name": "checker", "reward_key": "verdict"},
                ]
            }
        )
    )
    (run / "metrics.jsonl").write_text(json.dumps({"step": 0}) + "\n")
    rows = [
        {
            "group_id": "p0",
            "step": 0,
            "status": "ok",
            "reward": 0.0,
            "result": {},
            "reward_components": json.dumps({"solved": 0.0, "verdict": v}),
            "traces": [{"metadata": json.dumps({"policy": p})} for p in policies],
        }
        for v, policies in ((1.0, ["proposer", "checker"]), (0.0, ["proposer"]))
    ]
    (run / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert summarize_run(run, policy="checker").last_by_prompt == {"p0": [1.0]}
    assert summarize_run(run, policy="proposer").last_by_prompt == {"p0": [0.0, 0.0]}
    assert summarize_run(run).last_by_prompt == {"p0": [0.0, 0.0]}


class _Stepper(PolicyTrainer):
    """Trains nothing; steps one version on."""

    name = "stepper"

    async def step(self, batch: TrainingBatch) -> StepResult:
        return StepResult(batch.weight_version + 1, {}, None)


async def test_run_staleness_mean_is_weighted_by_turns() -> None:
    # the proposer's 3 turns are on-policy, the checker's one turn lags by 2
    eps = [
        Episode(
            f"e{i}",
            "g",
            f"s{i}",
            i,
            "ok",
            result={},
            reward=float(i),
            traces=[_record("proposer", turns=3, version=2), _record("checker", version=0)],
        )
        for i in range(2)
    ]
    config: Any = SimpleNamespace(
        training=SimpleNamespace(advantage="grpo"),
        rewards=SimpleNamespace(success_threshold=1.0),
    )
    policies = [PolicyConfig(name="proposer"), PolicyConfig(name="checker")]
    trainers = PolicyTrainers({p.name: _Stepper() for p in policies}, policies, config=config)
    trainers.versions = {"proposer": 2, "checker": 2}
    result = await trainers.step(TrainingBatch(0, [EpisodeGroup("g", {}, eps)], {}, 2))
    metrics = result.metrics
    assert metrics["policy/proposer/staleness_mean"] == 0.0
    assert metrics["policy/checker/staleness_mean"] == 2.0
    assert metrics["staleness_mean"] == 0.5  # (6 turns x 0 + 2 turns x 2) / 8
    assert metrics["staleness_max"] == 2
