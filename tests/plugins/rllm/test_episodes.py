"""rollhub episodes in rLLM's episode shape, and the ``rllm`` trainer that writes them."""

from __future__ import annotations

import json

import pytest
from rollhub.episode import Episode, EpisodeGroup, ErrorInfo
from rollhub.errors import UsageError
from rollhub.trace import TraceRecord, TurnSpan
from rollhub_rllm import contract
from rollhub_rllm.episodes import episode_to_rllm
from rollhub_rllm.trainer import RllmEpisodeExport, RllmExportOptions


def episode(status: str = "ok", **kw) -> Episode:
    record = TraceRecord(
        session_id="s", prompt_ids=[1, 2], response_ids=[10, 11, 5, 12],
        response_mask=[1, 1, 0, 1], response_logprobs=[-0.5, -0.25, 0.0, -1.0],
        turns=[TurnSpan(turn_index=0, start=0, end=2, finish_reason="tool_calls",
                        weight_version=2),
               TurnSpan(turn_index=1, start=3, end=4, weight_version=2)],
    )  # fmt: skip
    fields = {"episode_id": "s", "group_id": "q7", "session_id": "s", "sample_index": 3,
              "status": status, "payload": {"id": "q7"}, "traces": [record]}  # fmt: skip
    return Episode(**{**fields, **kw})


def test_an_ok_episode_keeps_every_calls_exact_ids():
    out = episode_to_rllm(episode(reward=1.0, result={"rewards": 1.0}, metrics={"elapsed_s": 2.0}))
    assert tuple(out) == contract.EPISODE_KEYS
    assert (out["id"], out["termination_reason"], out["is_correct"]) == ("q7:3", "env_done", True)
    (traj,) = out["trajectories"]
    assert tuple(traj) == contract.TRAJECTORY_KEYS and traj["reward"] == 1.0
    first, second = traj["steps"]
    assert tuple(first) == contract.STEP_KEYS
    assert (first["prompt_ids"], first["response_ids"], first["logprobs"]) == (
        [1, 2], [10, 11], [-0.5, -0.25],
    )  # fmt: skip
    assert (second["prompt_ids"], second["response_ids"]) == ([1, 2, 10, 11, 5], [12])
    assert [s["done"] for s in traj["steps"]] == [False, True]
    assert first["weight_version"] == 2 and first["info"]["finish_reason"] == "tool_calls"
    assert out["metrics"] == {"elapsed_s": 2.0, "steps_collected": 2, "empty": 0}


@pytest.mark.parametrize(
    ("status", "reason"), [("timeout", "timeout"), ("agent_error", "error"), ("cancelled", "error")]
)
def test_a_failed_episode_is_marked(status, reason):
    failed = episode(status, traces=[], error=ErrorInfo("Boom", "broke"), trainable=False)
    out = episode_to_rllm(failed)
    assert (out["termination_reason"], out["is_correct"], out["trajectories"]) == (
        reason,
        False,
        [],
    )
    assert out["info"]["rollhub_status"] == status and out["info"]["error"]["type"] == "Boom"
    assert out["metrics"]["empty"] == 1


async def test_the_rllm_trainer_appends_groups(tmp_path):
    with pytest.raises(UsageError, match="needs a run directory"):
        await RllmEpisodeExport().start()
    trainer = RllmEpisodeExport(RllmExportOptions(include_failed=False), run_dir=tmp_path)
    await trainer.start()
    group = EpisodeGroup("q7", {}, [episode(reward=0.5), episode("timeout", episode_id="t")])
    assert await trainer.consume(group) == {"rllm_episodes": 1}
    lines = (tmp_path / "rllm_episodes.jsonl").read_text().splitlines()
    assert [json.loads(x)["termination_reason"] for x in lines] == ["env_done"]
    assert await trainer.close() == {"rllm_episodes": str(tmp_path / "rllm_episodes.jsonl"),
                                     "episodes": 1}  # fmt: skip
