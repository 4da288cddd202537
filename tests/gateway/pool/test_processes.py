"""A pool of gateway replicas as child processes: placement, exact traces per session,
journals per replica, versions and policies everywhere, a SIGKILLed replica failing only
its own sessions, and no process left behind."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap

import anthropic
import openai
import pytest
from rollhub.errors import TokenRetrievalError
from rollhub.plugins import build_host
from rollhub.registry import ComponentContext
from rollhub_gateway.pool import ReplicaDied
from rollhub_gateway.token_source import GatewayTokenSource

from tests.gateway.pool.pool_checks import (
    alive,
    assert_exact,
    converse,
    converse_more,
    pool_options,
    wait_dead,
    wait_gone,
)


def build_source(options: dict) -> GatewayTokenSource:
    """The token source as the hub builds it: by name, from config options."""
    context = ComponentContext(exp_id="pool-test")
    return build_host().registry.build(
        "token_source", "gateway", options, section="token_source", context=context
    )


def journal_rows(path: str) -> dict[str, tuple[str, int]]:
    """``session id -> (state, turns)`` as a replica's journal holds them."""
    with sqlite3.connect(path) as db:
        turns = dict(db.execute("SELECT session_id, count(*) FROM turns GROUP BY session_id"))
        return {
            sid: (state, turns.get(sid, 0))
            for sid, state in db.execute("SELECT session_id, state FROM sessions")
        }


async def test_three_replicas_place_serve_journal_version_and_close(model_dir, tokenizer, tmp_path):
    source = GatewayTokenSource(
        GatewayTokenSource.Options.model_validate(
            pool_options(model_dir, replicas=3, journal_dir=str(tmp_path / "journals"))
        )
    )
    source.set_weight_version(7)
    await source.start()
    try:
        pool = source.pool
        assert pool is not None
        pids = [r.pid for r in pool.replicas]
        assert len(set(pids)) == 3 and all(alive(p) for p in pids)
        assert len({r.url for r in pool.replicas}) == 3
        assert source.url is None and source.urls == [r.url for r in pool.replicas]

        # Least-loaded placement: six opens deal two sessions to each replica, in turn.
        caps = [await source.open_session(f"s{i}") for i in range(6)]
        owners = [pool.replica_of(f"s{i}").index for i in range(6)]
        assert owners == [0, 1, 2, 0, 1, 2]
        assert caps[0].base_url != caps[1].base_url
        assert caps[0].base_url == pool.replicas[0].url + "/v1"

        # Every session converses at once; each trace holds exactly its own session's ids.
        turns = {f"s{i}": 2 + i % 3 for i in range(6)}
        replies = await asyncio.gather(*(converse(c, turns[c.session_id]) for c in caps))
        assert replies[4][1] == "p0 s4 turn 1"
        for sid, n in turns.items():
            traces = await source.fetch_traces(sid)
            assert_exact(traces, tokenizer, sid, n)
            assert traces[0].weight_versions == [7] * n

        # Closing two of replica 0's sessions makes it the least loaded: the next two land there.
        await source.close_session("s0")
        await source.close_session("s3", drop=True)
        assert [len(r.live) for r in pool.replicas] == [0, 2, 2]
        cap6, cap7 = await source.open_session("s6"), await source.open_session("s7")
        assert pool.replica_of("s6").index == 0 and pool.replica_of("s7").index == 0

        # A new weight version and a new policy reach every replica.
        await source.publish_policy("p1", 8)
        await asyncio.gather(converse(cap6, 1), converse(cap7, 1))
        for sid in ("s1", "s2", "s4", "s5"):
            cap = caps[int(sid[1])]
            more = await converse_more(cap, turns[sid])
            assert more == f"p1 {sid} turn {turns[sid]}"
        for sid in ("s6", "s7"):
            assert_exact(await source.fetch_traces(sid), tokenizer, sid, 1, policy="p1")
            assert (await source.fetch_traces(sid))[0].weight_versions == [8]
        traces5 = await source.fetch_traces("s5")
        assert traces5[0].weight_versions == [7] * turns["s5"] + [8]

        # Each replica journals its own sessions, in its own file.
        for sid in ("s1", "s2", "s4", "s5", "s6", "s7"):
            await source.close_session(sid)
        journals = sorted(os.listdir(tmp_path / "journals"))
        assert [j for j in journals if j.endswith(".sqlite")] == [
            "replica-0.sqlite", "replica-1.sqlite", "replica-2.sqlite",
        ]  # fmt: skip
        rows = [journal_rows(str(tmp_path / "journals" / f"replica-{i}.sqlite")) for i in range(3)]
        assert rows[0] == {"s0": ("done", 2), "s6": ("done", 1), "s7": ("done", 1)}  # s3 dropped
        assert rows[1] == {"s1": ("done", 4), "s4": ("done", 4)}
        assert rows[2] == {"s2": ("done", 5), "s5": ("done", 5)}

        # Opens racing each other are counted as they are placed: still an even spread.
        await asyncio.gather(*(source.open_session(f"c{i}") for i in range(9)))
        assert [len(r.live) for r in pool.replicas] == [3, 3, 3]
    finally:
        await source.close()
    assert await wait_gone(pids, timeout=5) == []
    await source.close()  # idempotent


async def test_a_killed_replica_fails_only_its_sessions(model_dir, tokenizer):
    # restarts=0: it stays dead (test_restart.py has replicas that come back)
    source = build_source(pool_options(model_dir, replicas=2, latency_s=0.4, restarts=0))
    await source.start()
    try:
        pool = source.pool
        caps = [await source.open_session(f"k{i}") for i in range(4)]
        victim = pool.replicas[1]
        assert sorted(victim.live) == ["k1", "k3"]
        agents = [asyncio.create_task(converse(c, 3)) for c in caps]
        await asyncio.sleep(0.6)  # every agent has a turn in flight (0.4 s each)
        os.kill(victim.pid, signal.SIGKILL)
        results = await asyncio.gather(*agents, return_exceptions=True)
        assert (await wait_dead(victim)).startswith("exited with signal SIGKILL")

        # The killed replica's agents lost their connection; the others finished exactly.
        assert isinstance(results[1], openai.APIError) and isinstance(results[3], openai.APIError)
        for i in (0, 2):
            assert results[i] == [f"p0 k{i} turn {t}" for t in range(3)]
            assert_exact(await source.fetch_traces(f"k{i}"), tokenizer, f"k{i}", 3)

        for sid in ("k1", "k3"):
            with pytest.raises(ReplicaDied) as err:
                await source.fetch_traces(sid)
            assert isinstance(err.value, TokenRetrievalError)
            msg = str(err.value)
            assert f"gateway replica 1 (process pid {victim.pid})" in msg
            assert "signal SIGKILL" in msg and repr(sid) in msg
            assert err.value.replica == 1 and err.value.session_id == sid
        with pytest.raises(ReplicaDied, match="signal SIGKILL"):
            await source.close_session("k1", drop=True)

        # An agent still calling the dead replica is told why, in its own wire format.
        with pytest.raises(openai.APIStatusError) as gone:
            await converse(caps[3], 1)
        assert gone.value.status_code == 410
        assert f"gateway replica 1 (process pid {victim.pid}) died" in gone.value.message
        assert "signal SIGKILL" in gone.value.message
        anthropic_client = anthropic.AsyncAnthropic(
            base_url=caps[3].extra["anthropic_base_url"], api_key=caps[3].api_key, max_retries=0
        )
        with pytest.raises(anthropic.APIStatusError, match="signal SIGKILL") as gone:
            await anthropic_client.messages.create(
                model="m", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
            )
        assert gone.value.status_code == 410 and gone.value.body["type"] == "error"
        await anthropic_client.close()

        # New sessions go to the survivor only.
        cap = await source.open_session("after")
        assert pool.replica_of("after").index == 0
        assert await converse(cap, 1) == ["p0 after turn 0"]
        for sid in ("k0", "k2", "after"):
            await source.close_session(sid)
        pids = [r.pid for r in pool.replicas]
    finally:
        await source.close()
    assert await wait_gone(pids, timeout=5) == []


CRASHING_PARENT = textwrap.dedent(
    """
    import asyncio, json, sys
    from rollhub_gateway.token_source import GatewayTokenSource

    async def main():
        source = GatewayTokenSource(GatewayTokenSource.Options.model_validate(
            json.loads(sys.argv[1])))
        await source.start()
        print(json.dumps([r.pid for r in source.pool.replicas]), flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main())
    """
)


async def test_replicas_exit_when_the_pool_process_is_killed(model_dir):
    """SIGKILL gives the pool no chance to stop its replicas: they must notice and exit."""
    options = json.dumps(pool_options(model_dir, replicas=2))
    parent = subprocess.Popen(
        [sys.executable, "-c", CRASHING_PARENT, options], stdout=subprocess.PIPE, text=True
    )
    try:
        line = await asyncio.wait_for(asyncio.to_thread(parent.stdout.readline), 120)
        pids = json.loads(line)
        assert len(pids) == 2 and all(alive(p) for p in pids)
    finally:
        parent.kill()
        parent.wait()
    assert await wait_gone(pids, timeout=10) == []
