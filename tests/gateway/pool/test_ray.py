"""Gateway replicas as Ray actors on a local two-node Ray cluster (loopback): one replica
per node, exact traces per session, policies through Ray, a killed actor failing only its
own sessions, and every actor gone after close."""

from __future__ import annotations

import asyncio

import pytest
from rollhub_gateway.pool import ReplicaDied
from rollhub_gateway.token_source import GatewayTokenSource

from tests.gateway.pool.pool_checks import (
    alive,
    assert_exact,
    converse,
    pool_options,
    wait_dead,
    wait_gone,
)

ray = pytest.importorskip("ray", reason="Ray is an optional dependency (rollhub[ray])")


@pytest.fixture(scope="module")
def cluster():
    """Two Ray nodes of one CPU each on 127.0.0.1 (no dashboard, no auth token)."""
    from ray._common.utils import reset_ray_address
    from ray._private import ray_constants
    from ray._private.utils import read_ray_address
    from ray.cluster_utils import Cluster

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_AUTH_MODE", "disabled")
        # Ray finds "the node's address" by its outbound route; a cluster of this machine
        # must use loopback for every node and the driver (read at call time, and by the
        # node processes from the environment).
        mp.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        mp.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)
        node = {"num_cpus": 1, "node_ip_address": "127.0.0.1"}
        c = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
        try:
            # a bare ray.init() elsewhere must not join this throwaway cluster
            if read_ray_address() == c.address:
                reset_ray_address()
            c.add_node(**node)
            c.wait_for_nodes()
            yield c
        finally:
            c.shutdown()


async def test_replicas_on_distinct_nodes_serve_exactly_and_die_alone(
    cluster, model_dir, tokenizer
):
    options = pool_options(
        model_dir, replicas=2, placement="ray", ray_address=cluster.address,
        num_cpus_per_replica=1, latency_s=0.3,
    )  # fmt: skip
    source = GatewayTokenSource(GatewayTokenSource.Options.model_validate(options))
    await source.start()
    try:
        pool = source.pool
        assert ray.is_initialized()
        nodes = {r.node_id for r in pool.replicas}
        assert len(nodes) == 2 and nodes == {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        assert all(r.url.startswith("http://127.0.0.1:") for r in pool.replicas)
        actor_pids = [r.pid for r in pool.replicas]

        caps = [await source.open_session(f"r{i}") for i in range(4)]
        assert [pool.replica_of(f"r{i}").index for i in range(4)] == [0, 1, 0, 1]
        assert await asyncio.gather(*(converse(c, 2) for c in caps)) == [
            [f"p0 r{i} turn 0", f"p0 r{i} turn 1"] for i in range(4)
        ]
        for i in range(4):
            assert_exact(await source.fetch_traces(f"r{i}"), tokenizer, f"r{i}", 2)
            await source.close_session(f"r{i}")

        # A policy travels through Ray to both actors; the version is stamped everywhere.
        await source.publish_policy("p1", 3)
        caps = [await source.open_session(f"q{i}") for i in range(4)]
        assert await asyncio.gather(*(converse(c, 1) for c in caps)) == [
            [f"p1 q{i} turn 0"] for i in range(4)
        ]
        for i in range(4):
            traces = await source.fetch_traces(f"q{i}")
            assert_exact(traces, tokenizer, f"q{i}", 1, policy="p1")
            assert traces[0].weight_versions == [3]

        # Killing replica 0's actor mid-turn fails its sessions only.
        victim = pool.replicas[0]
        agents = [asyncio.create_task(converse_on(c, 2)) for c in caps]
        await asyncio.sleep(0.15)
        ray.kill(victim.handle)
        results = await asyncio.gather(*agents, return_exceptions=True)
        assert "the Ray actor died" in await wait_dead(victim)
        assert isinstance(results[0], Exception) and isinstance(results[2], Exception)
        assert results[1] == results[3] == "ok"
        for sid in ("q0", "q2"):
            with pytest.raises(ReplicaDied) as err:
                await source.fetch_traces(sid)
            assert f"gateway replica 0 (ray actor pid {victim.pid}" in str(err.value)
            assert "the Ray actor died" in str(err.value) and err.value.replica == 0
        for sid in ("q1", "q3"):
            assert len((await source.fetch_traces(sid))[0].turns) == 3
        cap = await source.open_session("late")
        assert pool.replica_of("late").index == 1
        assert await converse(cap, 1) == ["p1 late turn 0"]
        await source.close_session("late", drop=True)
    finally:
        await source.close()
    assert not ray.is_initialized()  # the pool joined the cluster, so it leaves it
    assert await wait_gone(actor_pids, timeout=15) == []
    assert all(not alive(p) for p in actor_pids)


async def converse_on(cap, turns: int) -> str:
    """Two more turns after the first one (a trace of three); 'ok' when all answered."""
    import openai

    from tests.gateway.pool.engines import reply_text

    client = openai.AsyncOpenAI(base_url=cap.base_url, api_key=cap.api_key, max_retries=0)
    messages = [
        {"role": "user", "content": "question 0"},
        {"role": "assistant", "content": reply_text(cap.session_id, 0, "p1")},
    ]
    try:
        for i in range(1, turns + 1):
            messages.append({"role": "user", "content": f"question {i}"})
            r = await client.chat.completions.create(model=cap.model_id, messages=messages)
            messages.append({"role": "assistant", "content": r.choices[0].message.content})
    finally:
        await client.close()
    return "ok"
