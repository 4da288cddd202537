"""Gateway pool throughput: turns/s with 1, 2 and 4 replica processes.

Reproduce::

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_gateway_pool.py --replicas 1 2 4 \\
        --sessions 128 --turns 32 --drivers 2 --rounds 3

For each pool size, this process starts a ``gateway`` token source with ``pool = {replicas
= N, placement = "processes"}`` (the real SmolLM2 tokenizer, the Qwen2.5 tools template and
a 0 ms engine that answers every prompt with the same 24 ids, built in each replica by this
file's :func:`engine`), opens ``--sessions`` sessions through it (least-loaded placement)
and hands them to ``--drivers`` driver processes, ``--rounds`` times per pool. Each driver
runs its share of the agents at once over raw HTTP (aiohttp, the JSON an SDK sends, a
growing conversation). Reported: turns/s over the wall time of all drivers, turn latency,
and the CPU seconds the replicas and the drivers used (``/proc/<pid>/stat``), per turn,
next to how busy the whole machine was (``/proc/stat``).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import statistics
import time
from pathlib import Path
from typing import Any

from bench_gateway import agent_raw  # the same raw-HTTP agent as the one-process bench

os.environ.setdefault("HF_HUB_OFFLINE", "1")

OUTPUT_TEXT = "The answer is forty-two, and here is a short explanation of why that holds."
TICKS = os.sysconf("SC_CLK_TCK")


def engine(config: Any) -> Any:
    """The replicas' engine (``engine_factory``): the same 24 ids for every prompt, 0 ms."""
    from rollhub.sampling import Generation, SamplingBackend
    from rollhub_gateway.models import load_tokenizer

    tok = load_tokenizer(config.model)
    out = [
        *tok.encode(OUTPUT_TEXT, add_special_tokens=False),
        tok.convert_tokens_to_ids("<|im_end|>"),
    ]
    lps = [-0.5] * len(out)

    class Fixed(SamplingBackend):
        name = "bench-fixed"

        async def generate(self, prompt_ids: list[int], params: Any, *, turn: Any = None) -> Any:
            return Generation(list(out), list(lps), "stop")

    return Fixed()


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def machine_busy_s() -> float:
    """CPU seconds all cores of the machine spent busy so far (``/proc/stat``)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return (sum(values[:8]) - idle) / TICKS


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def drive(sessions: list[tuple[str, str]], turns: int, go: Any, out: Any) -> None:
    """Driver process: wait for the start signal, run every agent at once, report."""
    import aiohttp

    async def main() -> tuple[int, int, list[float], float, float, float]:
        conn = aiohttp.TCPConnector(limit=0)
        timeout = aiohttp.ClientTimeout(total=600)
        async with aiohttp.ClientSession(connector=conn, timeout=timeout) as http:
            lat: list[float] = []
            go.wait()
            t0, c0 = time.perf_counter(), time.process_time()
            errs = await asyncio.gather(
                *(agent_raw(http, u.removesuffix("/v1"), k, turns, lat) for u, k in sessions)
            )
            t1, c1 = time.perf_counter(), time.process_time()
        return len(lat), sum(errs), lat, t0, t1, c1 - c0

    out.put((os.getpid(), *asyncio.run(main())))


async def run_pool(args: argparse.Namespace, replicas: int) -> list[dict[str, Any]]:
    """Start a pool of ``replicas``, run ``--rounds`` rounds of fresh sessions on it."""
    import importlib.util

    from rollhub_gateway.token_source import GatewayTokenSource

    spec = importlib.util.find_spec("trl")
    assert spec is not None and spec.origin is not None
    template = str(Path(spec.origin).parent / "chat_templates" / "qwen2_5.jinja")
    options = GatewayTokenSource.Options.model_validate(
        {
            "model": "smollm2-135m-instruct",
            "chat_template": template,
            "family": "hermes",
            "log_turns": False,
            "policy": {"max_concurrent_requests": 4},
            "pool": {
                "replicas": replicas,
                "placement": "processes",
                "engine_factory": f"{Path(__file__).resolve()}:engine",
                "start_timeout_s": 300,
            },
        }
    )
    source = GatewayTokenSource(options)
    t0 = time.perf_counter()
    await source.start()
    started = time.perf_counter() - t0
    try:
        rounds = []
        for n in range(args.rounds):
            row = await run_round(args, source, f"b{replicas}-{n}")
            rounds.append({"replicas": replicas, "round": n + 1, "start_s": started, **row})
    finally:
        await source.close()
    return rounds


async def run_round(args: argparse.Namespace, source: Any, prefix: str) -> dict[str, Any]:
    """One round: open ``--sessions`` sessions, drive them from driver processes, close."""
    pool = source.pool
    pids = [r.pid for r in pool.replicas]
    caps = [await source.open_session(f"{prefix}-{i}") for i in range(args.sessions)]
    shares = [
        [(c.base_url, c.api_key) for c in caps[d :: args.drivers]] for d in range(args.drivers)
    ]
    ctx = mp.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=drive, args=(s, args.turns, go, out)) for s in shares]
    for p in procs:
        p.start()
    await asyncio.sleep(3)  # the drivers import aiohttp and wait at the start line
    gw0, m0 = sum(cpu_s(p) for p in pids), machine_busy_s()
    go.set()
    results = [await asyncio.to_thread(out.get, True, 900) for _ in procs]
    gw1, m1 = sum(cpu_s(p) for p in pids), machine_busy_s()
    for p in procs:
        p.join(30)
    driver_cpu = sum(r[6] for r in results)
    turns = sum(r[1] for r in results)
    lat = [x for r in results for x in r[3]]
    wall = max(r[5] for r in results) - min(r[4] for r in results)
    per_replica = [len(r.live) for r in pool.replicas]
    for c in caps:
        await source.close_session(c.session_id, drop=True)
    return {
        "sessions_per_replica": per_replica,
        "turns": turns,
        "errors": sum(r[2] for r in results),
        "wall_s": wall,
        "turns_per_s": turns / wall,
        "p50_ms": statistics.median(lat) * 1e3,
        "p99_ms": pct(lat, 0.99) * 1e3,
        "gateway_cpu_ms_per_turn": (gw1 - gw0) / max(turns, 1) * 1e3,
        "gateway_cpu_util": (gw1 - gw0) / wall,
        "driver_cpu_ms_per_turn": driver_cpu / max(turns, 1) * 1e3,
        "driver_cpu_util": driver_cpu / wall,
        # the results arrive a moment after the last driver ends: a slight overestimate
        "machine_util": (m1 - m0) / wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--turns", type=int, default=16)
    parser.add_argument("--drivers", type=int, default=1, help="driver processes")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per pool size")
    args = parser.parse_args()
    print(f"cores: {os.cpu_count()}, load average: {os.getloadavg()[0]:.1f}")
    print(
        f"\n{args.sessions} concurrent sessions x {args.turns} turns, {args.drivers} driver "
        f"process(es), raw HTTP, engine 0 ms\n"
    )
    print(
        "| replicas | round | sessions per replica | turns | errors | wall s | turns/s | p50 ms | p99 ms "
        "| gateway CPU ms/turn | gateway cores busy | driver CPU ms/turn | driver cores busy "
        "| machine cores busy | pool start s |"
    )
    print("| --- " * 15 + "|")
    summary = []
    for n in args.replicas:
        rows = asyncio.run(run_pool(args, n))
        for r in rows:
            print(
                f"| {n} | {r['round']} | {'/'.join(map(str, r['sessions_per_replica']))} | "
                f"{r['turns']} | {r['errors']} | {r['wall_s']:.1f} | {r['turns_per_s']:.0f} | "
                f"{r['p50_ms']:.0f} | {r['p99_ms']:.0f} | {r['gateway_cpu_ms_per_turn']:.2f} | "
                f"{r['gateway_cpu_util']:.2f} | {r['driver_cpu_ms_per_turn']:.2f} | "
                f"{r['driver_cpu_util']:.2f} | {r['machine_util']:.2f} | {r['start_s']:.1f} |",
                flush=True,
            )
        rates = [r["turns_per_s"] for r in rows]
        busy = max(r["gateway_cpu_util"] for r in rows)
        summary.append((n, statistics.median(rates), max(rates), busy))
    print(
        "\n| replicas | turns/s, median of rounds | turns/s, best round | gateway cores busy, most |"
    )
    print("| --- | --- | --- | --- |")
    for n, med, best, busy in summary:
        print(f"| {n} | {med:.0f} | {best:.0f} | {busy:.2f} |")


if __name__ == "__main__":
    main()
