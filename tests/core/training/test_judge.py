"""The judge: a frozen policy ranks each group's episodes; its calls are recorded, never
trained, and their cost is reported per step."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import rollhub_gateway.plugin as gateway_plugin
from rollhub.judge.prompt import parse_rank, parse_score, rank_messages
from rollhub.testing import make_hub
from rollhub.training.loop import TrainingLoop
from rollhub_gateway.models import load_tokenizer

from tests.core.training.test_policies import AGENT, _Plugin

RUBRIC = "The verdict must say ACCEPT."


@pytest.fixture(scope="module")
def ranking() -> list[int]:
    """What every scripted engine answers: a rank reply for a group of two."""
    tok = load_tokenizer("smollm2-135m-instruct")
    return [
        *tok.encode("1: 8\n2: 2", add_special_tokens=False),
        tok.convert_tokens_to_ids("<|im_end|>"),
    ]


def _config(tmp_path: Path, reply: list[int], **extra: Any) -> dict[str, Any]:
    return {
        "experiment": {
            "name": "judged",
            "n_samples": 2,
            "concurrency": 4,
            "timeout_s": 60,
            "progress": False,
            "seed": 2,
        },
        "runtime": {"name": "local", "app": f"{AGENT}:app", "workers": 2},
        "store": {"url": f"file://{tmp_path / 'store'}"},
        "token_source": {
            "name": "gateway",
            "log_turns": False,
            "engine": {"name": "scripted", "options": {"reply": reply}},
        },
        "trainer": {"name": "policy-recorder"},
        "training": {"batch_groups": 1, "checkpoint_every": 0, "shuffle": False, "steps": 2},
        # the judge's score is the reward; the agent's own rewards only inform
        "rewards": {"weights": {"solved": 0.0, "verdict": 0.0}},
        "policies": [
            {"name": "proposer"},
            {"name": "checker"},
            {"name": "partner", "trainable": False},
            {"name": "critic", "trainable": False},
        ],
        "judge": {"policy": "critic", "mode": "rank", "rubric": RUBRIC, "max_tokens": 16},
        **extra,
    }


async def test_a_gateway_policy_ranks_each_group_recorded_and_never_trained(tmp_path, ranking):
    run = tmp_path / "run"
    hub = make_hub(_config(tmp_path, ranking), gateway_plugin, _Plugin(), run_dir=run)
    async with hub:
        await TrainingLoop(hub, [{"id": "p0"}, {"id": "p1"}], run_dir=run).run()
        trainer = hub.trainer
        critic = hub.token_source.gateway.policies.named("critic").backend
    assert set(trainer.trainers) == {"proposer", "checker"}
    for name in trainer.trainers:
        for batch in trainer.trainers[name].batches:
            (group,) = batch.groups
            # the judge's ranks, in sample order, are the reward that trains each policy
            assert [e.reward for e in group.episodes] == [0.8, 0.2]
            assert [e.reward_components["judge"] for e in group.episodes] == [0.8, 0.2]
            assert [e.metrics["judge"]["score"] for e in group.episodes] == [0.8, 0.2]
            assert all(r.policy == name for e in group.episodes for r in e.traces)
    assert critic.published == []  # frozen: nothing was published to the judge's engine
    assert len(critic.turns) == 2  # one call per group
    rows = [json.loads(x) for x in (run / "judge.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    for row in rows:
        assert row["mode"] == "rank" and row["model"] == "critic" and row["scores"] == [0.8, 0.2]
        assert RUBRIC in row["prompt"] and "Attempt 2:" in row["prompt"]
        assert row["records"] == [
            {"policy": "critic", "weight_versions": [0], "sampled_tokens": len(ranking)}
        ]
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    for m in metrics:
        assert m["judge_calls"] == 1 and m["judge_unparsed"] == 0
        assert m["judge_completion_tokens"] == len(ranking)
        assert m["judge_prompt_tokens"] > 0 and m["judge_s"] > 0
        assert "policy/critic/loss" not in m


async def test_a_judge_at_an_openai_compatible_endpoint(tmp_path, ranking, monkeypatch):
    from rollhub_gateway.chat_model import build_chat_model
    from rollhub_gateway.engines.scripted import ScriptedBackend, ScriptedOptions
    from rollhub_gateway.gateway import Gateway

    backend = ScriptedBackend(ScriptedOptions(reply=ranking))
    elsewhere = Gateway(backend, build_chat_model("smollm2-135m-instruct"))
    await elsewhere.start()
    try:
        key = elsewhere.open_session("outside-judge").key
        monkeypatch.setenv("JUDGE_KEY", key)
        judge = {
            "base_url": elsewhere.base_url,
            "model": "any-judge",
            "api_key_env": "JUDGE_KEY",
            "mode": "score",
            "rubric": RUBRIC,
        }
        policies = [
            {"name": "proposer"},
            {"name": "checker"},
            {"name": "partner", "trainable": False},
        ]
        config = _config(
            tmp_path, ranking, judge=judge, policies=policies, trainer={"name": "export"}
        )
        hub = make_hub(config, gateway_plugin, _Plugin(), run_dir=tmp_path / "run")
        async with hub:
            group = await hub.run_group({"id": "p0"})
        # score mode: one call per episode; "1: 8 ..." reads as its first number, 1 → 0.1
        assert [e.reward_components["judge"] for e in group.episodes] == [0.1, 0.1]
        assert group.metrics["judge"]["calls"] == 2
        assert len(elsewhere.traces("outside-judge")) == 2  # both calls reached that endpoint
    finally:
        await elsewhere.close()


def test_rank_replies_are_read_per_attempt():
    assert parse_rank("1: 7\n2: 10\n3 - 0", 3, 10) == [0.7, 1.0, 0.0]
    assert parse_rank("Attempt 2: 4\nattempt 1 = 9\n2: 1", 2, 10) == [0.9, 0.4]
    assert parse_rank("no idea", 2, 10) == [None, None]
    assert parse_rank("1: 15\n9: 3", 2, 10) == [None, None]  # above the scale; no attempt 9
    # a judge doing the task's arithmetic gives no score (was read as 1.0 for every attempt)
    assert parse_rank("1: 8080 + 9110 = 17190\n2: 17190", 2, 10) == [None, None]
    assert parse_rank("1: 15\n1: 6\n2: 3", 2, 10) == [0.6, 0.3]  # the first in range counts
    assert parse_score("Score: 6/10", 10) == 0.6 and parse_score("none", 10) is None
    assert parse_score("17190", 10) is None
    messages = rank_messages("Add 2 and 3.", ["5", "6"], "Right answers win.", 10)
    assert "Attempt 1:\n5" in messages[-1]["content"] and "2: <score>" in messages[-1]["content"]
