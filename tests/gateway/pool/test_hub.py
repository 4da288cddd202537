"""The pool behind a real hub: episodes on a SIGKILLed replica fail with the replica's
death as their error (the agent's own error kept beside it); the other replica's episodes
complete with exact traces."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from rollhub.config import parse_config
from rollhub.hub import AsyncHub

from tests.gateway.pool.conftest import assert_exact, pool_options, wait_gone

AGENT = Path(__file__).with_name("chat_agent.py")


def pool_hub(tmp_path: Path, model_dir: str, **pool: object) -> AsyncHub:
    """A hub running the chat agent on a 2-replica pool (0.3 s per turn)."""
    cfg = parse_config(
        {
            "experiment": {"name": "pool", "n_samples": 1, "concurrency": 8, "timeout_s": 90,
                           "progress": False},
            "runtime": {"name": "local", "app": f"{AGENT}:app", "workers": 1},
            "store": {"url": f"file://{tmp_path / 'store'}"},
            "token_source": {"name": "gateway",
                             **pool_options(model_dir, replicas=2, latency_s=0.3, **pool)},
            "trainer": {"name": "export"},
        },
        env={},
    )  # fmt: skip
    return AsyncHub(cfg, run_dir=tmp_path / "run")


async def test_a_replica_killed_under_a_hub_fails_only_its_episodes(tmp_path, model_dir, tokenizer):
    hub = pool_hub(tmp_path, model_dir, restarts=0)
    episodes = []
    async with hub:
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
            [{"id": f"g{i}", "turns": 3, "retries": 2} for i in range(4)]
        ):
            episodes += group.episodes
        doomed = await killer
        pids = [r.pid for r in pool.replicas]
    assert await wait_gone(pids, timeout=5) == []

    assert len(episodes) == 4 and len(doomed) == 2
    for ep in episodes:
        if ep.session_id in doomed:
            assert ep.status == "agent_error" and not ep.trainable
            # the episode's error is the capture side's: the replica and how it died
            assert ep.error.type == "ReplicaDied", ep.error
            assert f"gateway replica 1 (process pid {victim.pid}) died" in ep.error.message
            assert "signal SIGKILL" in ep.error.message and ep.session_id in ep.error.message
            assert ep.metrics["close_session_error"].startswith("ReplicaDied: ")
            # the agent's own error is kept: its SDK retried the cut call and reached the
            # pool's answer for the dead replica
            agent_error = ep.metrics["agent_error"]
            assert "410" in agent_error and "gateway replica 1" in agent_error, agent_error
        else:
            assert ep.status == "ok", ep.error
            assert ep.result["replies"] == [f"p0 {ep.session_id} turn {t}" for t in range(3)]
            assert_exact(ep.traces, tokenizer, ep.session_id, 3)


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
