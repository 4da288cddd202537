"""An engine failing under an agent's model call, through a real hub and gateway: the
agent's error is the infrastructure's, so the rollout runs again on a new session, or,
with none left, ends ``infra_error`` (never trained, never given a reward)."""

from __future__ import annotations

from pathlib import Path

import pytest

AGENT = Path(__file__).parents[1] / "gateway" / "pool" / "chat_agent.py"


def _engine_down(prompt_ids: list[int]) -> list[int]:
    raise RuntimeError("engine down")  # what a failing sampling backend raises


def _hub(tmp_path: Path, session_attempts: int, rewards: dict[str, str]):
    from rollhub.config import parse_config
    from rollhub.hubs.async_hub import AsyncHub
    from rollhub.plugins import build_host
    from rollhub_gateway.models import SMOLLM2

    cfg = parse_config(
        {
            "experiment": {"name": "engine", "n_samples": 1, "timeout_s": 60, "progress": False,
                           "session_attempts": session_attempts},
            "runtime": {"name": "local", "app": f"{AGENT}:app", "workers": 1},
            "store": {"url": f"file://{tmp_path / 'store'}"},
            "token_source": {"name": "gateway", "model": SMOLLM2, "engine": {"name": "scripted"}},
            "rewards": rewards,
        },
        env={},
    )  # fmt: skip
    return AsyncHub(cfg, host=build_host(), run_dir=tmp_path / "run")


@pytest.mark.asyncio(loop_scope="function")
async def test_an_engine_failure_costs_the_rollout_a_session_not_the_agent(tmp_path) -> None:
    from rollhub_gateway.models import SMOLLM2, load_tokenizer

    ok = [*load_tokenizer(SMOLLM2).encode("live turn"), 2]
    hub = _hub(tmp_path, 2, {})
    async with hub:
        hub.token_source.gateway.backend.add(_engine_down, ok)
        group = await hub.run_group({"id": "p0", "turns": 1, "retries": 0}, 1)
    (episode,) = group.episodes
    assert episode.status == "ok", episode.error
    assert episode.session_id == f"{episode.episode_id}-r1"
    (dead,) = episode.metrics["dead_sessions"]
    assert "engine down" in dead["cause"]
    (record,) = episode.traces
    assert record.response_ids == ok


@pytest.mark.asyncio(loop_scope="function")
async def test_with_no_session_left_it_ends_infra_error_even_under_zero_reward(tmp_path) -> None:
    hub = _hub(tmp_path, 1, {"on_failure": "zero_reward"})
    async with hub:
        hub.token_source.gateway.backend.add(_engine_down)
        group = await hub.run_group({"id": "p0", "turns": 1, "retries": 0}, 1)
    (episode,) = group.episodes
    assert episode.status == "infra_error", episode.status
    assert "engine down" in episode.error.message
    assert "502" in episode.metrics["agent_error"]  # what the agent saw, kept beside it
    assert not episode.trainable and episode.reward is None
