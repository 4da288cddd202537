"""A replica process that dies is started again on its own address: with journals its
sessions carry on (same URL, same key, every answered turn kept, the last policy and
version restored); without, only its sessions fail, with the cause and the fix; past its
restarts it stays dead and agents are told why."""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

import openai
import pytest
from rollhub_gateway.pool import ReplicaDied
from rollhub_gateway.token_source import GatewayTokenSource

from tests.gateway.pool.engines import reply_ids, reply_text
from tests.gateway.pool.pool_checks import (
    converse,
    converse_more,
    pool_options,
    wait_dead,
    wait_gone,
)


def start_source(options: dict[str, Any]) -> GatewayTokenSource:
    return GatewayTokenSource(GatewayTokenSource.Options.model_validate(options))


async def wait_restarted(replica: Any, old_pid: int, timeout: float = 60.0) -> None:
    """Until the replica serves again from a new process."""
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        if replica.dead is not None:
            raise AssertionError(f"{replica.name} stayed dead: {replica.dead}")
        if replica.pid != old_pid and not replica.restarting and replica.starts > 1:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{replica.name} did not come back in {timeout}s")


async def test_a_killed_replica_comes_back_with_its_journaled_sessions(
    model_dir: str, tokenizer: Any, tmp_path: Any
) -> None:
    source = start_source(pool_options(model_dir, replicas=2, journal_dir=str(tmp_path / "j")))
    source.set_weight_version(7)
    await source.start()
    pids: list[int] = []
    try:
        pool = source.pool
        assert pool is not None
        caps = [await source.open_session(f"k{i}") for i in range(4)]
        await asyncio.gather(*(converse(c, 2) for c in caps))
        await source.publish_policy("p1", 8)
        victim = pool.replicas[1]
        old_pid, url = victim.pid, victim.url
        pids.append(old_pid)
        assert sorted(victim.live) == ["k1", "k3"]
        os.kill(old_pid, signal.SIGKILL)
        await wait_restarted(victim, old_pid)
        pids.append(victim.pid)
        assert victim.url == url and victim.dead is None and victim.lost == {}
        assert victim.deaths[0].startswith("exited with signal SIGKILL")
        assert sorted(victim.live) == ["k1", "k3"]

        # Its agents carry on with the URL and key they hold; the new process samples from
        # the last published policy and stamps the pool's weight version.
        for i in range(4):
            assert await converse_more(caps[i], 2) == f"p1 k{i} turn 2"
        for i in range(4):
            (rec,) = await source.fetch_traces(f"k{i}")
            assert rec.weight_versions == [7, 7, 8]
            for t in rec.turns:
                policy = "p0" if t.turn_index < 2 else "p1"
                want = reply_ids(tokenizer, reply_text(f"k{i}", t.turn_index, policy))
                assert rec.response_ids[t.start : t.end] == want
            assert [t.drift for t in rec.turns] == ["append"] * 3

        # It takes new sessions again.
        await source.close_session("k1")
        await source.close_session("k3")
        cap = await source.open_session("after")
        assert pool.replica_of("after") is victim
        assert await converse(cap, 1) == ["p1 after turn 0"]
    finally:
        await source.close()
    assert await wait_gone(pids, timeout=5) == []


async def test_without_journals_only_the_dead_replicas_sessions_fail_then_it_stays_dead(
    model_dir: str, tokenizer: Any
) -> None:
    source = start_source(pool_options(model_dir, replicas=2, restarts=1))
    await source.start()
    pids: list[int] = []
    try:
        pool = source.pool
        assert pool is not None
        caps = [await source.open_session(f"n{i}") for i in range(4)]
        await asyncio.gather(*(converse(c, 1) for c in caps))
        victim = pool.replicas[1]
        old_pid = victim.pid
        pids.append(old_pid)
        os.kill(old_pid, signal.SIGKILL)
        while not victim.restarting:
            await asyncio.sleep(0.01)
        # a policy published while it restarts reaches it once it serves
        await source.publish_policy("p1", 3)
        await wait_restarted(victim, old_pid)
        pids.append(victim.pid)

        # Its sessions are lost, with how and the setting that would have kept them.
        for sid in ("n1", "n3"):
            with pytest.raises(ReplicaDied) as err:
                await source.fetch_traces(sid)
            msg = str(err.value)
            assert f"gateway replica 1 (process pid {old_pid}) died" in msg
            assert "signal SIGKILL" in msg and "journal_dir" in msg and repr(sid) in msg
            assert err.value.session_id == sid and err.value.replica == 1
        # their agents, still holding the replica's URL and their keys, are told why
        with pytest.raises(openai.APIStatusError) as gone:
            await converse_more(caps[1], 1)
        assert gone.value.status_code == 410
        assert f"gateway replica 1 (process pid {old_pid}) died" in gone.value.message
        assert "journal_dir" in gone.value.message and "'n1' is lost" in gone.value.message
        # the other replica's sessions are untouched
        assert await converse_more(caps[0], 1) == "p1 n0 turn 1"
        (rec,) = await source.fetch_traces("n0")
        assert rec.response_ids[rec.turns[1].start :] == reply_ids(tokenizer, "p1 n0 turn 1")

        # The restarted replica serves new sessions.
        cap = await source.open_session("fresh")
        assert pool.replica_of("fresh") is victim
        assert await converse(cap, 2) == ["p1 fresh turn 0", "p1 fresh turn 1"]

        # Its one restart is used: killed again, it stays dead and says why.
        second = victim.pid
        os.kill(second, signal.SIGKILL)
        assert (await wait_dead(victim)).startswith("exited with signal SIGKILL")
        with pytest.raises(ReplicaDied, match="signal SIGKILL"):
            await source.fetch_traces("fresh")
        with pytest.raises(openai.APIStatusError) as gone:
            await converse(cap, 1)
        assert gone.value.status_code == 410
        assert f"gateway replica 1 (process pid {second}) died" in gone.value.message
        await source.open_session("later")
        assert pool.replica_of("later").index == 0
        for sid in ("n0", "n2", "later"):
            await source.close_session(sid)
    finally:
        await source.close()
    assert await wait_gone(pids, timeout=5) == []
