"""Client-side benchmark: no-op rollouts per second through the local runtime, completion
latency after the store write (callback vs polling), store requests per rollout, and the
cost of the loopback callback server (raw asyncio vs Starlette on uvicorn).

    python bench/bench_client.py                    # print a markdown report
    python bench/bench_client.py --out docs/benchmarks/client.md

CPU time is measured per process (client and workers), so the report also gives the
throughput two idle cores could sustain even when the machine is shared while it runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import platform
import random
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
AGENT = str(ROOT / "tests/core/client/noop_agent.py") + ":app"
TICK = os.sysconf("SC_CLK_TCK")


class CountingStore:
    """Wraps a store and counts every request the client makes to it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.url = inner.url
        self.requests = 0

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self.inner, attr)
        if attr in ("get", "put", "exists", "list", "delete"):

            def counted(*a: Any, **k: Any) -> Any:
                self.requests += 1
                return value(*a, **k)

            return counted
        return value


def proc_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def throughput(n: int, concurrency: int, workers: int, keep_alive: bool) -> dict[str, Any]:
    import rollhub.client as client_mod
    from rollhub.client import AsyncRolloutClient
    from rollhub.runtimes.local import LocalRuntime
    from rollhub.stores.file import FileResultStore
    from rollhub.submission.callbacks import CallbackServer

    client_mod.CallbackServer = functools.partial(CallbackServer, keep_alive=keep_alive)  # type: ignore[misc]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            store = CountingStore(FileResultStore(tmp))
            async with LocalRuntime(app=AGENT, workers=workers) as rt:
                async with AsyncRolloutClient(rt, store, exp_id="bench") as client:
                    # warm-up: imports, connections, thread pools
                    async for _ in client.run_batch_async(
                        [{"x": -i} for i in range(50)], max_concurrent=concurrency, progress=False
                    ):
                        pass
                    store.requests = 0
                    pids = rt.worker_pids()
                    w0 = sum(proc_cpu(p) for p in pids)
                    c0 = time.process_time()
                    t0 = time.perf_counter()
                    seen = 0
                    async for item in client.run_batch_async(
                        [{"x": i} for i in range(n)], max_concurrent=concurrency, progress=False
                    ):
                        seen += item.ok
                    wall = time.perf_counter() - t0
                    client_cpu = time.process_time() - c0
                    worker_cpu = sum(proc_cpu(p) for p in pids) - w0
    finally:
        client_mod.CallbackServer = CallbackServer  # type: ignore[misc]
    per = (client_cpu + worker_cpu) / n
    return {
        "n": n,
        "ok": seen,
        "wall_rate": n / wall,
        "client_ms": 1000 * client_cpu / n,
        "worker_ms": 1000 * worker_cpu / n,
        "capacity_2_cores": 2 / per,
        "store_requests": store.requests / n,
    }


async def latency(n: int, concurrency: int, callbacks: bool) -> dict[str, Any]:
    from rollhub.client import AsyncRolloutClient
    from rollhub.runtimes.local import LocalRuntime
    from rollhub.stores.file import FileResultStore

    rng = random.Random(1)
    payloads = [
        {"mode": "sleep", "seconds": round(rng.uniform(0.05, 0.5), 3), "x": i} for i in range(n)
    ]
    lat: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        inner = FileResultStore(tmp)
        store = CountingStore(inner)
        async with LocalRuntime(app=AGENT, workers=2) as rt:
            async with AsyncRolloutClient(rt, store, exp_id="lat", callbacks=callbacks) as client:
                async for item in client.run_batch_async(
                    payloads, max_concurrent=concurrency, progress=False
                ):
                    assert item.ok, item
                    # ctime: the rename that made the document visible (mtime is the earlier write)
                    written = inner.path(item.outcome.result_key).stat().st_ctime_ns / 1e9
                    lat.append(item.outcome.finished_at - written)
    return {
        "n": n,
        "p50_ms": 1000 * statistics.median(lat),
        "p95_ms": 1000 * pct(lat, 0.95),
        "max_ms": 1000 * max(lat),
        "store_requests": store.requests / n,
    }


DRIVER = textwrap.dedent(
    """
    import asyncio, sys, time, httpx
    url, n, conc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    async def main():
        sem = asyncio.Semaphore(conc)
        async with httpx.AsyncClient() as http:
            await http.post(url, json={"session_id": "warm-up", "status": "ok"})
            t0 = time.perf_counter()
            async def one(i):
                async with sem:
                    r = await http.post(url, json={"session_id": f"s{i}", "status": "ok"})
                    assert r.status_code in (200, 204), r.status_code
            await asyncio.gather(*(one(i) for i in range(n)))
            print(time.perf_counter() - t0)
    asyncio.run(main())
    """
)


async def callback_server_cost(kind: str, n: int, concurrency: int) -> dict[str, Any]:
    """CPU the receiving process spends per notice."""
    received = 0

    def on_notice(_: dict[str, Any]) -> None:
        nonlocal received
        received += 1

    if kind == "raw asyncio":
        from rollhub.submission.callbacks import CallbackServer

        server = CallbackServer(on_notice)
        await server.start()
        url, stop = server.url, server.close
    else:
        import socket

        import uvicorn
        from starlette.applications import Starlette
        from starlette.responses import Response
        from starlette.routing import Route

        async def handle(request: Any) -> Response:
            on_notice(await request.json())
            return Response(status_code=204)

        app = Starlette(routes=[Route("/cb", handle, methods=["POST"])])
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        srv = uvicorn.Server(
            uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
        )
        task = asyncio.get_running_loop().create_task(srv.serve(sockets=[sock]))
        while not srv.started:
            await asyncio.sleep(0.01)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/cb"

        async def stop() -> None:
            srv.should_exit = True
            await task

    try:
        c0 = time.process_time()
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            DRIVER,
            url,
            str(n),
            str(concurrency),
            stdout=asyncio.subprocess.PIPE,
        )
        out, _ = await proc.communicate()
        assert proc.returncode == 0
        wall = float(out.decode().strip().splitlines()[-1])
        cpu = time.process_time() - c0
    finally:
        await stop()
    assert received == n + 1
    return {"server_us": 1e6 * cpu / n, "rate": n / wall}


def machine() -> str:
    model = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    load = os.getloadavg()[0]
    return f"{os.cpu_count()} cores ({model}), Python {platform.python_version()}, load average {load:.1f} at start"


async def main(args: argparse.Namespace) -> str:
    lines = [
        "# Client benchmarks",
        "",
        f"Reproduce: `python bench/bench_client.py --n {args.n} --concurrency {args.concurrency}`",
        f"Machine: {machine()}.",
        "",
        "## No-op rollouts through the local runtime",
        "",
        f"{args.n} rollouts of a no-op agent, `max_concurrent={args.concurrency}`, 2 workers, `file://` store, "
        "callbacks on. *CPU/rollout* is measured per process; *capacity* is what two idle cores "
        "sustain at that cost (2 s of CPU per second / CPU per rollout).",
        "",
        "| callback connections | wall rollouts/s | client CPU ms/rollout | worker CPU ms/rollout | capacity on 2 cores (/s) | store requests/rollout |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for keep_alive in (True, False):
        for _ in range(args.repeat):
            r = await throughput(args.n, args.concurrency, 2, keep_alive)
            assert r["ok"] == args.n
            label = "keep-alive" if keep_alive else "close after each notice"
            lines.append(
                f"| {label} | {r['wall_rate']:.0f} | {r['client_ms']:.2f} | {r['worker_ms']:.2f} | "
                f"{r['capacity_2_cores']:.0f} | {r['store_requests']:.3f} |"
            )
    lines += [
        "",
        "## Completion latency after the store write",
        "",
        f"{args.latency_n} rollouts sleeping 50-500 ms (uniform), `max_concurrent=32`. Latency = the "
        "moment the future resolved minus the moment the result file became visible (its ctime, set by the atomic rename).",
        "",
        "| completion | p50 ms | p95 ms | max ms | store requests/rollout |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for callbacks in (True, False):
        r = await latency(args.latency_n, 32, callbacks)
        lines.append(
            f"| {'callback' if callbacks else 'store polling'} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | "
            f"{r['max_ms']:.1f} | {r['store_requests']:.2f} |"
        )
    lines += [
        "",
        "## Callback server: raw asyncio vs Starlette on uvicorn",
        "",
        f"{args.notices} notices POSTed by httpx (keep-alive) from another process, 16 at a time. "
        "CPU of the receiving process per notice; the rate is bounded by the sending process.",
        "",
        "| server | receiver CPU µs/notice | notices/s |",
        "| --- | ---: | ---: |",
    ]
    for kind in ("raw asyncio", "Starlette + uvicorn"):
        r = await callback_server_cost(kind, args.notices, 16)
        lines.append(f"| {kind} | {r['server_us']:.0f} | {r['rate']:.0f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency-n", type=int, default=200)
    parser.add_argument("--notices", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--out", type=Path)
    ns = parser.parse_args()
    report = asyncio.run(main(ns))
    print(report)
    if ns.out:
        ns.out.write_text(report)
