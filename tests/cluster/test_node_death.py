"""A worker node SIGKILLed (all its processes at once, as a machine that loses power) in
the middle of a training run on a three-node Ray cluster:
its rollouts and the capture sessions of its gateway replica are infrastructure faults,
run again elsewhere; the replica is restarted by Ray on the live node; the run reaches
its last step with nothing lost, duplicated, blamed on the agent or trained as a reward;
the node comes back, gets a rollout actor and a gateway replica back, and takes rollouts."""

from __future__ import annotations

import asyncio
import json
import time

from rollhub.config import parse_config
from rollhub.hubs.async_hub import AsyncHub
from rollhub.plugins import build_host
from rollhub.runtimes.ray import RayRuntime
from rollhub.training.loop import TrainingLoop

from tests.cluster import recording_trainer
from tests.cluster.cluster_config import (
    CHAT_AGENT,
    WORKER,
    back_up_if_failed,
    cluster_config,
    ray,
)

VICTIM = "worker-1"


async def test_a_worker_node_dies_mid_run_and_nothing_is_lost(cluster, model_dir, tmp_path):
    run_dir = tmp_path / "run"
    cfg = parse_config(cluster_config(tmp_path, cluster, model_dir), env={})
    # three chat turns of 0.2 s each: every rollout is mid-conversation for most of its life
    payloads = [{"id": f"q{i}", "turns": 3, "retries": 0} for i in range(6)]
    hub = AsyncHub(cfg, host=build_host(plugins=[recording_trainer]), run_dir=run_dir)
    killed: dict[str, float] = {}
    with back_up_if_failed(cluster, VICTIM):
        async with hub:
            runtime, pool = hub.runtime, hub.token_source.pool
            # placement: rollout actors and gateway replicas on the worker nodes, none on the head
            assert runtime.placement() == {"worker-1": 1, "worker-2": 1}
            assert sorted(r.node for r in pool.replicas) == ["worker-1", "worker-2"]
            victim = next(r for r in pool.replicas if r.node == VICTIM)
            loop = TrainingLoop(hub, payloads, run_dir=run_dir, progress=False)

            async def kill_in_step_two() -> None:
                while not (loop.steps_done >= 1 and len(victim.live) >= 2):
                    await asyncio.sleep(0.02)
                await asyncio.sleep(0.2)  # the agents are mid-conversation
                killed["live"] = float(len(victim.live))
                killed["step"] = float(loop.steps_done)  # the step being sampled
                await asyncio.to_thread(cluster.kill_node, VICTIM, at_once=True)

            killer = asyncio.create_task(kill_in_step_two())
            summary = await loop.run()
            await asyncio.wait_for(killer, 1)  # it killed the node before the run ended
            # the replica is restarted by Ray on the live node, at a new address (its sessions
            # were given up as soon as its death was seen: the run may end before it serves)
            deadline = time.monotonic() + 60
            while victim.restarts_done < 1 and victim.dead is None:
                assert time.monotonic() < deadline, pool.status()
                await asyncio.sleep(0.1)
            assert victim.dead is None and victim.restarts_done == 1 and victim.node == "worker-2"
            assert _ray_restarts(victim) == 1
            assert pool.status()[victim.index]["restarts"] == 1
            # the rollout actor there too, replaced on the live node (seen by a rollout's failed
            # call, or, if none ran there when it died, by the runtime's look at Ray's node table)
            while runtime.placement() != {"worker-2": 2}:
                assert time.monotonic() < deadline, runtime.placement()
                await asyncio.sleep(0.1)

            # the node comes back and rejoins: a rollout actor and a gateway replica move to it
            await asyncio.to_thread(cluster.wait_node_gone, VICTIM)
            await asyncio.to_thread(cluster.start_node, VICTIM)
            deadline = time.monotonic() + 60
            while runtime.placement() != {"worker-1": 1, "worker-2": 1} or sorted(
                r.node for r in pool.replicas
            ) != ["worker-1", "worker-2"]:
                assert time.monotonic() < deadline, (runtime.placement(), pool.status())
                await asyncio.sleep(0.2)
            assert runtime.actors_moved == 1
            assert sum(s["moves"] for s in pool.status()) == 1
            assert [s["restarts"] for s in pool.status()] == [
                int(r is victim) for r in pool.replicas
            ]
            late = await hub.run_group({"id": "late", "turns": 1, "retries": 0}, 4)
            assert {e.metrics["node"] for e in late.episodes} == {"worker-1", "worker-2"}

    assert summary["steps"] == summary["total_steps"] == 3
    rows = [json.loads(x) for x in (run_dir / "episodes.jsonl").read_text().splitlines()]
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    trained = [json.loads(x) for x in (run_dir / "trained.jsonl").read_text().splitlines()]
    # 0 lost, 0 duplicated: every sample of every step once, each ended ok
    assert sorted((r["step"], r["group_id"], r["sample_index"]) for r in rows) == [
        (s, f"q{2 * s + g}", i) for s in range(3) for g in range(2) for i in range(2)
    ]
    assert len({r["episode_id"] for r in rows}) == len(rows) == 12
    assert {r["status"] for r in rows} == {"ok"}, [
        (r["status"], r["error_type"], r["error_message"], r["metrics"])
        for r in rows
        if r["status"] != "ok"
    ]
    # the node's death cost sessions, each run again elsewhere; none was the agent's fault
    retried = [r for r in rows if json.loads(r["metrics"]).get("dead_sessions")]
    # the step being sampled at the kill (or the next, should a session of it start on the
    # node before its death is seen)
    step = int(killed["step"])
    assert retried and {r["step"] for r in retried} <= {step, step + 1}
    for r in retried:
        for dead in json.loads(r["metrics"])["dead_sessions"]:
            assert "died" in dead["cause"] and VICTIM in dead["cause"], dead
    # trained: every episode once, never an infrastructure failure, never an imputed reward
    assert sorted(t["episode_id"] for t in trained) == sorted(r["episode_id"] for r in rows)
    assert {t["status"] for t in trained} == {"ok"}
    # metrics.jsonl: episodes per node; the killed step counts no failure
    assert metrics[0]["episodes_by_node"] == {"worker-1": 2, "worker-2": 2}
    assert all(m["episodes_by_node"] == {"worker-2": 4} for m in metrics[step + 2 :])
    assert all(m["episodes_failed"] == m["episodes_infra_failed"] == 0 for m in metrics)
    assert killed["live"] >= 2


async def test_an_idle_actor_on_a_dead_node_is_replaced_before_a_rollout_meets_it(cluster):
    """No rollout runs on the node when it dies: the runtime still sees the node go (Ray's
    node table) and replaces its actor on a live node, before a rollout is sent to it."""
    runtime = RayRuntime(app=f"{CHAT_AGENT}:app", address=cluster.address, actors=2,
                         resources=WORKER, start_timeout_s=30, head_timeout_s=5)  # fmt: skip
    with back_up_if_failed(cluster, VICTIM):
        async with runtime:
            assert runtime.placement() == {"worker-1": 1, "worker-2": 1}
            await asyncio.to_thread(cluster.kill_node, VICTIM, at_once=True)
            deadline = time.monotonic() + 30
            while runtime.placement() != {"worker-2": 2}:
                assert time.monotonic() < deadline, runtime.placement()
                await asyncio.sleep(0.1)
            assert runtime.actors_started == 3
            # the node comes back and gets its actor back
            await asyncio.to_thread(cluster.wait_node_gone, VICTIM)
            await asyncio.to_thread(cluster.start_node, VICTIM)
            deadline = time.monotonic() + 60
            while runtime.placement() != {"worker-1": 1, "worker-2": 1}:
                assert time.monotonic() < deadline, runtime.placement()
                await asyncio.sleep(0.2)


def _ray_restarts(replica) -> int:
    """Ray's own count of the actor's restarts (the GCS actor table)."""
    from ray._private.state import actors

    return int(actors(replica.handle._actor_id.hex())["NumRestarts"])


def test_ray_is_left(cluster):
    """The hub's Ray connection is closed with it; the cluster keeps running."""
    assert not ray.is_initialized()
    assert all(node.alive for node in cluster.nodes.values())
