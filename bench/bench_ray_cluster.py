"""Rollouts on a Ray cluster of this machine: 1 vs 2 worker nodes, and a node killed 10 times.

Reproduce::

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_ray_cluster.py --out docs/benchmarks/ray-cluster.json

One :class:`~rollhub.testing.ray_cluster.LocalRayCluster` (a head and two worker nodes of
one CPU each, every node its own ``ray start`` process) serves both parts. This process is
the driver (the hub, on the head). Rollouts run as ``ray`` runtime actors (2) and their
model calls go to a pool of 2 gateway replicas as Ray actors (the SmolLM2 tokenizer and
chat template, an engine answering every turn with the same 16 ids in 0 ms, built by this
file's :func:`engine`). The agent (``bench/ray_bench_agent.py``) makes ``--turns`` model
calls, each followed by ``cpu_ms`` of busy work and ``io_ms`` of waiting.

Scaling: the same batches (``--groups`` groups of 4, ``--rounds`` times after a warm-up
group) with the actors and replicas pinned to worker-1 (a custom resource only it
offers), then spread over both worker nodes; two agents, one waiting on I/O and one
computing. Reported: episodes/s (median round) and per-episode latency (p50, p90). The machine has 2
cores for the head, both workers and this driver (and it is shared): a second node adds
processes, not cores, so no scaling beyond what 2 cores allow can show here.

Faults: a steady stream of groups while worker-1 and worker-2 are SIGKILLed in turn
(their raylet; the node's ``ray start`` ends the rest), ``--kills`` times; after each kill
the node is started again and the next kill waits until it has a rollout actor and a
gateway replica again. Per kill: seconds from the kill to the first rollout running again
elsewhere (its next session accepted by a live actor), to the last one, and to the dead
node's gateway replica serving again (restarted by Ray on the live node); sessions run
again; how long the node took to come back and to get its actor and replica back.
Overall: episodes, those that needed a new session, those lost (ended failed),
duplicates.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

HERE = Path(__file__).resolve().parent
AGENT = f"{HERE / 'ray_bench_agent.py'}:app"
ENGINE = f"{Path(__file__).resolve()}:engine"
REPLY = "Fine: the next step follows from the last one."

WORKLOADS = {"io": {"io_ms": 200, "cpu_ms": 0}, "cpu": {"io_ms": 0, "cpu_ms": 100}}


def engine(config: Any) -> Any:
    """The replicas' engine (``engine_factory``): the same ids for every turn, 0 ms."""
    from rollhub.sampling import Generation, SamplingBackend
    from rollhub_gateway.models import load_tokenizer

    tok = load_tokenizer(config.model)
    ids = [*tok.encode(REPLY, add_special_tokens=False), tok.convert_tokens_to_ids("<|im_end|>")]

    class Fixed(SamplingBackend):
        name = "bench-fixed"

        async def generate(self, prompt_ids: list[int], params: Any, *, turn: Any = None) -> Any:
            return Generation(list(ids), [-0.5] * len(ids), "stop")

    return Fixed()


def model_dir(root: Path) -> str:
    """SmolLM2's tokenizer and template as a plain directory (replicas load it in ~1 s)."""
    from rollhub_gateway.models import load_tokenizer

    path = root / "tokenizer"
    load_tokenizer("smollm2-135m-instruct").save_pretrained(path)
    (path / "config.json").write_text(json.dumps({"max_position_embeddings": 8192}))
    return str(path)


def config(cluster: Any, tokenizer: str, store: Path, resources: dict[str, float]) -> Any:
    from rollhub.config import parse_config

    return parse_config(
        {
            "experiment": {"name": "bench-ray", "n_samples": 4, "timeout_s": 120,
                           "progress": False, "session_attempts": 3, "concurrency": 32},
            "runtime": {"name": "ray", "app": AGENT, "address": cluster.address, "actors": 2,
                        "resources": resources, "start_timeout_s": 60},
            "store": {"url": f"file://{store}"},
            "token_source": {
                "name": "gateway", "model": tokenizer, "log_turns": False,
                "engine": {"name": "scripted"},
                "pool": {"replicas": 2, "placement": "ray", "ray_address": cluster.address,
                         "ray_resources": resources, "engine_factory": ENGINE,
                         "start_timeout_s": 120, "restarts": 50},
            },
            "trainer": {"name": "export"},
        },
        env={},
    )  # fmt: skip


async def scaling(
    cluster: Any, tokenizer: str, root: Path, groups: int, turns: int, rounds: int
) -> list:
    """Episodes/s and latency with the work on one worker node, then on two (``rounds``
    batches each, after a warm-up group; medians)."""
    from rollhub.hubs.async_hub import AsyncHub

    rows = []
    for workload, extra in WORKLOADS.items():
        for nodes, resources in ((1, {"rollhub_node_worker_1": 0.001}),
                                 (2, {"rollhub_worker": 0.001})):  # fmt: skip
            cfg = config(cluster, tokenizer, root / f"store-{workload}-{nodes}", resources)
            async with AsyncHub(cfg, run_dir=root / f"run-{workload}-{nodes}") as hub:
                await hub.run_group({"id": "warm", "turns": turns, **extra})
                walls, lat, ok, n = [], [], 0, 0
                for r in range(rounds):
                    payloads = [{"id": f"r{r}g{i}", "turns": turns, **extra} for i in range(groups)]
                    t0 = time.monotonic()
                    out = await asyncio.gather(*(hub.run_group(p) for p in payloads))
                    walls.append(time.monotonic() - t0)
                    eps = [e for g in out for e in g.episodes]
                    lat += [e.elapsed for e in eps if e.elapsed is not None]
                    ok, n = ok + sum(e.ok for e in eps), n + len(eps)
                lat.sort()
                wall = statistics.median(walls)
                rows.append({
                    "workload": workload, **extra, "worker_nodes": nodes,
                    "placement": hub.runtime.placement(),
                    "replicas": sorted(r.node for r in hub.token_source.pool.replicas),
                    "episodes_per_round": n // rounds, "rounds": rounds, "ok": ok,
                    "episodes": n,
                    "wall_s_median": round(wall, 2),
                    "episodes_per_s": round(n / rounds / wall, 2),
                    "episodes_per_s_rounds": [round(n / rounds / w, 2) for w in walls],
                    "latency_p50_s": round(lat[len(lat) // 2], 3),
                    "latency_p90_s": round(lat[int(len(lat) * 0.9)], 3),
                    "load_avg_1m": os.getloadavg()[0],
                })  # fmt: skip
                print(json.dumps(rows[-1]), flush=True)
    return rows


async def faults(cluster: Any, tokenizer: str, root: Path, kills: int, turns: int) -> dict:
    """Kill worker-1 and worker-2 in turn under a steady stream of groups."""
    from rollhub.hubs.async_hub import AsyncHub

    cfg = config(cluster, tokenizer, root / "store-faults", {"rollhub_worker": 0.001})
    accepted: list[tuple[float, str]] = []  # (time, session id) of sessions run again
    episodes: list[Any] = []
    per_kill: list[dict[str, Any]] = []
    async with AsyncHub(cfg, run_dir=root / "run-faults") as hub:
        runtime, pool = hub.runtime, hub.token_source.pool
        submit = runtime.submit

        async def timed_submit(request: Any) -> Any:
            receipt = await submit(request)
            if "-r" in request.rollout.session_id:
                accepted.append((time.monotonic(), request.rollout.session_id))
            return receipt

        runtime.submit = timed_submit  # type: ignore[method-assign]
        stop = asyncio.Event()

        async def stream() -> None:
            n = 0
            while not stop.is_set():
                batch = [{"id": f"s{n + i}", "turns": turns, "io_ms": 300} for i in range(4)]
                n += 4
                for g in await asyncio.gather(*(hub.run_group(p) for p in batch)):
                    episodes.extend(g.episodes)

        streamer = asyncio.create_task(stream())
        await asyncio.sleep(5)
        for k in range(kills):
            victim = f"worker-{k % 2 + 1}"
            on_victim = [r for r in pool.replicas if r.node == victim]
            restarts_before = {r.index: r.restarts_done for r in on_victim}
            seen = len(accepted)
            t_kill = time.monotonic()
            await asyncio.to_thread(cluster.kill_node, victim)
            await asyncio.to_thread(cluster.wait_node_gone, victim)
            deadline = t_kill + 60
            while time.monotonic() < deadline and any(
                r.restarts_done == restarts_before[r.index] for r in on_victim
            ):
                await asyncio.sleep(0.05)
            t_replicas = time.monotonic()
            await asyncio.sleep(3)  # the last retries of its rollouts
            again = [t for t, _ in accepted[seen:]]
            per_kill.append({
                "kill": k + 1, "node": victim,
                "first_rollout_elsewhere_s": round(again[0] - t_kill, 2) if again else None,
                "last_rollout_elsewhere_s": round(again[-1] - t_kill, 2) if again else None,
                "replicas_on_node": len(on_victim),
                "replicas_serving_again_s": round(t_replicas - t_kill, 2) if on_victim else None,
                "sessions_run_again": len(again),
            })  # fmt: skip
            await asyncio.to_thread(cluster.start_node, victim)
            t_up = time.monotonic()
            while not balanced(runtime, pool):  # an actor and a replica moved back to it
                await asyncio.sleep(0.2)
            per_kill[-1]["node_back_s"] = round(t_up - t_kill, 2)
            per_kill[-1]["work_back_on_it_s"] = round(time.monotonic() - t_up, 2)
            print(json.dumps(per_kill[-1]), flush=True)
            await asyncio.sleep(2)
        stop.set()
        await streamer
    retried = [e for e in episodes if e.metrics.get("dead_sessions")]
    return {
        "kills": per_kill,
        "episodes": len(episodes),
        "episodes_ok": sum(e.ok for e in episodes),
        "episodes_lost": sum(not e.ok for e in episodes),
        "episodes_infra_error": sum(e.status == "infra_error" for e in episodes),
        "episodes_agent_error": sum(e.status == "agent_error" for e in episodes),
        "episodes_retried": len(retried),
        "duplicated": len(episodes) - len({e.episode_id for e in episodes}),
        "first_rollout_elsewhere_s_median": statistics.median(
            k["first_rollout_elsewhere_s"] for k in per_kill if k["first_rollout_elsewhere_s"]
        ),
        "replicas_serving_again_s_median": statistics.median(
            k["replicas_serving_again_s"] for k in per_kill if k["replicas_serving_again_s"]
        ),
    }


def balanced(runtime: Any, pool: Any) -> bool:
    """One rollout actor and one gateway replica serving on each worker node."""
    nodes = ["worker-1", "worker-2"]
    replicas = [r for r in pool.replicas if not (r.restarting or r.draining or r.dead)]
    return sorted(runtime.placement()) == nodes and sorted(r.node for r in replicas) == nodes


async def main(args: argparse.Namespace) -> dict[str, Any]:
    from rollhub.testing.ray_cluster import LocalRayCluster

    root = Path(tempfile.mkdtemp(prefix="bench-ray-"))
    try:
        tokenizer = model_dir(root)
        with LocalRayCluster(root / "cluster", workers=2, cpus=1, health_check_s=2.0) as cluster:
            out: dict[str, Any] = {"cpus": os.cpu_count(), "turns": args.turns}
            if "scaling" in args.parts:
                out["scaling"] = await scaling(
                    cluster, tokenizer, root, args.groups, args.turns, args.rounds
                )
            if "faults" in args.parts:
                out["faults"] = await faults(cluster, tokenizer, root, args.kills, args.turns)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", nargs="+", default=["scaling", "faults"])
    parser.add_argument("--groups", type=int, default=16, help="groups of 4 per scaling run")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3, help="batches per scaling run")
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    result = asyncio.run(main(args))
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    sys.exit(0)
