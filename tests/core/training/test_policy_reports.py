"""Per-policy figures where runs are looked at: ``rollhub eval`` reports, ``rollhub
compare --policy``, episodes read back from ``episodes.jsonl`` and the step's progress
line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rollhub.cli import main
from rollhub.episode import Episode
from rollhub.errors import UsageError
from rollhub.export import episode_from_row, episode_to_row
from rollhub.policies import PolicyConfig
from rollhub.runs.comparison import compare_runs, summarize_run
from rollhub.runs.evaluation import summarize_episodes
from rollhub.trace import TraceRecord, TurnSpan
from rollhub.training.recorder import progress_line

POLICIES = [
    PolicyConfig(name="proposer", reward_key="drafted"),
    PolicyConfig(name="checker", reward_key="checked"),
]


def _record(policy: str | None, n: int = 2) -> TraceRecord:
    return TraceRecord(
        session_id="s",
        prompt_ids=[1],
        response_ids=[5] * n,
        response_mask=[1] * n,
        response_logprobs=[-0.1] * n,
        policy=policy,
        turns=[TurnSpan(turn_index=0, start=0, end=n, policy=policy)],
    )


def _episode(i: int, drafted: float, checked: float) -> Episode:
    return Episode(
        episode_id=f"e{i}",
        group_id="g",
        session_id=f"s{i}",
        sample_index=i,
        status="ok",
        result={"success": bool(drafted and checked)},
        reward=drafted * checked,
        reward_components={"drafted": drafted, "checked": checked},
        traces=[_record("proposer", 3), _record("checker", 1)],
    )


def test_eval_reports_each_policy_by_its_own_reward():
    by_prompt = {
        "q1": [_episode(0, 1, 0), _episode(1, 1, 1)],
        "q2": [_episode(2, 0, 1), _episode(3, 1, 1)],
    }
    report = summarize_episodes("base", by_prompt, 2, policies=POLICIES)
    assert report.pass_at_1 == 0.5  # the agent's own success flag
    proposer, checker = report.policies["proposer"], report.policies["checker"]
    assert proposer["pass_at_1"] == 0.75 and checker["pass_at_1"] == 0.75
    assert proposer["by_prompt"]["q1"]["solved"] == [1, 1]
    assert checker["by_prompt"]["q1"]["solved"] == [0, 1]
    assert proposer["reward_key"] == "drafted"
    assert proposer["pass_at_1_ci"][0] < 0.75 < proposer["pass_at_1_ci"][1]
    assert proposer["turns_mean"] == 1.0  # its own turns only


def test_policy_of_each_record_survives_episodes_jsonl():
    row = json.loads(json.dumps(episode_to_row(_episode(0, 1, 1), "exp")))
    back = episode_from_row(row)
    assert [t.policy for t in back.traces] == ["proposer", "checker"]
    assert [t.turns[0].policy for t in back.traces] == ["proposer", "checker"]
    one = episode_to_row(Episode("e", "g", "s", 0, "ok", traces=[_record(None)]), "exp")
    assert "policy" not in json.loads(one["traces"][0]["metadata"])  # unchanged for one policy


def _run(path: Path, *, proposer: float, checker: float) -> Path:
    path.mkdir(parents=True)
    config = {
        "policies": [
            {"name": "proposer", "reward_key": "drafted"},
            {"name": "checker", "reward_key": "checked"},
        ]
    }
    (path / "config.json").write_text(json.dumps(config))
    metrics, episodes = [], []
    for step in range(3):
        metrics.append(
            {
                "step": step,
                "success_rate": 0.1,
                "policy/proposer/success_rate": proposer,
                "policy/checker/success_rate": checker,
            }
        )
        for j in range(4):
            comps = {"drafted": float(j < proposer * 4), "checked": float(j < checker * 4)}
            episodes.append(
                {
                    "group_id": f"p{step}",
                    "step": step,
                    "status": "ok",
                    "reward": 0.0,
                    "reward_components": json.dumps(comps),
                    "result": {},
                }
            )
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metrics))
    (path / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in episodes))
    held = {
        name: {
            "pass_at_1": rate,
            "pass_at_1_ci": [rate - 0.1, rate + 0.1],
            "by_prompt": {
                f"h{i}": {"split": None, "solved": [int(rate >= 0.5)] * 2} for i in range(5)
            },
        }
        for name, rate in (("proposer", proposer), ("checker", checker))
    }
    (path / "eval.json").write_text(json.dumps({"after": {"pass_at_1": 0.1, "policies": held}}))
    return path


def test_compare_one_policy_of_runs_against_a_control(tmp_path: Path, capsys):
    trained = _run(tmp_path / "trained", proposer=0.75, checker=0.5)
    control = _run(tmp_path / "control", proposer=0.25, checker=0.25)
    run = summarize_run(trained, policy="checker")
    assert run.last["success_rate"] == 0.5 and run.after["pass_at_1"] == 0.5
    (vs,) = [r for r in compare_runs([run], summarize_run(control, policy="checker")) if r is run]
    assert vs.versus_control["last_success"]["difference"] == pytest.approx(0.25)
    assert vs.versus_control["held_out_pass_at_1"]["difference"] == pytest.approx(1.0)
    with pytest.raises(UsageError, match="no policy 'judge' \\(policies: proposer, checker\\)"):
        summarize_run(trained, policy="judge")
    assert (
        main(
            [
                "compare",
                str(trained),
                "--control",
                str(control),
                "--policy",
                "proposer",
                "--markdown",
                "--plot",
                str(tmp_path / "c.png"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "| trained | - | 3 | 0.750 |" in out and "+0.500" in out


def test_progress_line_shows_each_policys_loss():
    metrics = {
        "reward_mean": 0.5,
        "policy/proposer/loss": -0.19313,
        "policy/checker/loss": 0.0085296,
        "policy/checker/success_rate": 0.6,
    }
    line = progress_line(0, 4, metrics)
    assert "loss proposer=-0.1931 checker=0.00853  tokens" in line
    # one policy: the run's own loss, as before
    assert "loss 0.25  tokens" in progress_line(0, 4, {**metrics, "loss": 0.25})
    assert "loss -  tokens" in progress_line(0, 4, {"reward_mean": 0.5})
