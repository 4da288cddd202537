"""The pool behind a real hub: episodes on a SIGKILLed replica are infrastructure faults,
run again on a new session on the live replica (or, with no session left, ended
``infra_error`` with the replica's death as their error, the agent's own error kept beside
it); the other replica's episodes complete with exact traces."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from rollhub.config import parse_config
from rollhub.hubs.async_hub import AsyncHub

from tests.gateway.pool.pool_checks import assert_exact, pool_options, wait_gone

AGENT = Path(__file__).with_name("chat_agent.py")


def pool_hub(tmp_path: Path, model_dir: str, session_attempts: int = 2, **pool: object) -> AsyncHub:
    """A hub running the chat agent on a 2-replica pool (0.3 s per turn)."""
    cfg = parse_config(
        {
            "experiment": {"name": "pool", "n_samples": 1, "concurrency": 8, "timeout_s": 90,
                           "progress": False, "session_attempts": session_attempts},
            "runtime": {"name": "local", "app": f"{AGENT}:app", "workers": 1},
            "store": {"url": f"file://{tmp_path / 'store'}"},
            "token_source": {"name": "gateway",
                             **pool_options(model_dir, replicas=2, latency_s=0.3, **pool)},
            "trainer": {"name": "export"},
        },
        env={},
    )  # fmt: skip
    return AsyncHub(cfg, run_dir=tmp_path / "run")


async def _kill_under_hub(hub: AsyncHub, groups: int) -> tuple[list, set[str], int, list[int]]:
    """Run ``groups`` chat episodes; SIGKILL replica 1 once two agents are mid-conversation.
    Returns the episodes, the sessions the replica held, its pid and every replica's pid."""
    episodes = []
    pool = hub.token_source.pool
    victim = pool.replicas[1]

    async def kill_when_busy() -> set[str]:
        while len(victim.live) < 2:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.45)  # the agents are mid-conversation (0.3 s per turn)
        doomed = set(victim.live)
        os.kill(victim.pid, signal.SIGKILL)
        return doomed

    killer = asyncio.create_task(kill_when_busy())
    async for group in hub.iter_groups(
        [{"id": f"g{i}", "turns": 3, "retries": 2} for i in range(groups)]
    ):
        episodes += group.episodes
    return episodes, await killer, victim.pid, [r.pid for r in pool.replicas]


async def test_a_replica_killed_under_a_hub_costs_its_episodes_a_session(
    tmp_path, model_dir, tokenizer
):
    """Its episodes run again on a new session on the live replica and end ok, never
    ``agent_error``; the dead session and the replica's death are on the episode."""
    hub = pool_hub(tmp_path, model_dir, restarts=0)
    async with hub:
        episodes, doomed, victim_pid, pids = await _kill_under_hub(hub, 4)
        assert hub.token_source.pool.replicas[1].dead is not None
    assert await wait_gone(pids, timeout=5) == []

    assert len(episodes) == 4 and len(doomed) == 2
    for ep in episodes:
        assert ep.status == "ok", ep.error
        assert ep.result["replies"] == [f"p0 {ep.session_id} turn {t}" for t in range(3)]
        assert_exact(ep.traces, tokenizer, ep.session_id, 3)
        if ep.episode_id in doomed:  # run again on the live replica: one dead session
            (dead,) = ep.metrics["dead_sessions"]
            assert dead["session_id"] == ep.episode_id and ep.session_id == f"{ep.episode_id}-r1"
            assert f"gateway replica 1 (process pid {victim_pid}) died" in dead["cause"]
            assert "signal SIGKILL" in dead["cause"]
        else:
            assert "dead_sessions" not in ep.metrics


async def test_a_replica_killed_with_no_session_left_ends_its_episodes_infra_error(
    tmp_path, model_dir
):
    """With ``session_attempts = 1`` they end ``infra_error`` (never trained), the replica's
    death as their error and the agent's own error (the 410 it read) beside it."""
    hub = pool_hub(tmp_path, model_dir, session_attempts=1, restarts=0)
    async with hub:
        episodes, doomed, victim_pid, pids = await _kill_under_hub(hub, 4)
    assert await wait_gone(pids, timeout=5) == []
    assert len(doomed) == 2
    for ep in episodes:
        if ep.session_id not in doomed:
            assert ep.status == "ok", ep.error
            continue
        assert ep.status == "infra_error" and not ep.trainable and ep.reward is None
        assert ep.error.type == "ReplicaDied", ep.error
        assert f"gateway replica 1 (process pid {victim_pid}) died" in ep.error.message
        assert "signal SIGKILL" in ep.error.message and ep.session_id in ep.error.message
        # the agent's own error is kept: its SDK retried the cut call and reached the
        # pool's answer for the dead replica
        agent_error = ep.metrics["agent_error"]
        assert "410" in agent_error and "gateway replica 1" in agent_error, agent_error


async def test_with_journals_a_killed_replica_loses_no_episode(tmp_path, model_dir, tokenizer):
    hub = pool_hub(tmp_path, model_dir, journal_dir=str(tmp_path / "journals"))
    episodes = []
    async with hub:
        pool = hub.token_source.pool
        victim = pool.replicas[1]

        async def kill_when_busy() -> tuple[int, set[str]]:
            while len(victim.live) < 2:
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.45)  # the agents are mid-conversation (0.3 s per turn)
            pid, doomed = victim.pid, set(victim.live)
            os.kill(pid, signal.SIGKILL)
            return pid, doomed

        killer = asyncio.create_task(kill_when_busy())
        # the agents' SDK retries the cut call (backoff up to 8 s) while the replica restarts
        async for group in hub.iter_groups(
            [{"id": f"g{i}", "turns": 3, "retries": 6} for i in range(4)]
        ):
            episodes += group.episodes
        old_pid, doomed = await killer
        assert victim.pid != old_pid and victim.dead is None
        pids = [old_pid, *(r.pid for r in pool.replicas)]
    assert await wait_gone(pids, timeout=5) == []

    assert len(episodes) == 4 and len(doomed) == 2
    for ep in episodes:  # the killed replica's episodes too: every answered turn kept
        assert ep.status == "ok", ep.error
        assert ep.result["replies"] == [f"p0 {ep.session_id} turn {t}" for t in range(3)]
        assert_exact(ep.traces, tokenizer, ep.session_id, 3)
