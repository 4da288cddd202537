"""The gateway's own cost: added latency per turn, concurrent sessions, memory per session.

Reproduce::

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_gateway.py --sessions 2000 --turns 3

The gateway runs in its own process (its CPU apart from the load generator's) with a
scripted engine that answers every prompt with the same 24 token ids after a fixed
latency (``--latency-ms``), and the real SmolLM2 tokenizer + Qwen2.5 tools template.

1. **Added latency**: the same number of sequential turns (a growing conversation) timed
   three ways: the engine called directly in process, raw HTTP (aiohttp, the same JSON an
   SDK sends), and the ``openai`` SDK. Added = gateway median - engine median.
2. **Concurrent sessions**: ``--sessions`` agents at once, each opening its own session
   and making ``--turns`` calls over raw HTTP; counts errors and reports throughput.
3. **Memory per session**: the gateway process's RSS growth over those sessions (while
   they are open, after their turns), divided by the number of sessions.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import statistics
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

OUTPUT_TEXT = "The answer is forty-two, and here is a short explanation of why that holds."


def _serve(port_q: Any, stop_ev: Any, latency_s: float) -> None:
    """Child process: a gateway with a fixed-output scripted engine."""
    import importlib.util
    from pathlib import Path

    from rollhub_gateway.chat_model import build_chat_model
    from rollhub_gateway.config import GatewayConfig
    from rollhub_gateway.engines.scripted import ScriptedBackend, ScriptedOptions
    from rollhub_gateway.gateway import Gateway
    from rollhub_gateway.models import load_tokenizer

    tok = load_tokenizer("smollm2-135m-instruct")
    out = [*tok.encode(OUTPUT_TEXT, add_special_tokens=False), tok.convert_tokens_to_ids("<|im_end|>")]

    class FixedBackend(ScriptedBackend):
        def _next(self, prompt_ids: list[int], params: Any) -> tuple[list[int], str]:
            return list(out), "stop"

        async def generate(self, prompt_ids: list[int], params: Any, *, turn: Any = None) -> Any:
            gen = await super().generate(prompt_ids, params, turn=turn)
            self.prompts.clear()  # keep no per-call state: memory is the gateway's alone
            self.turns.clear()
            return gen

    spec = importlib.util.find_spec("trl")
    template = (Path(spec.origin).parent / "chat_templates" / "qwen2_5.jinja").read_text()
    model = build_chat_model(
        "smollm2-135m-instruct", chat_template=template, family="hermes", tokenizer=tok
    )
    cfg = GatewayConfig(admin_token="bench", log_turns=False, policy={"max_concurrent_requests": 4})
    gw = Gateway(FixedBackend(options=ScriptedOptions(latency_s=latency_s)), model, cfg)

    async def main() -> None:
        await gw.start()
        port_q.put((gw.url, os.getpid()))
        while not stop_ev.is_set():
            await asyncio.sleep(0.1)
        await gw.close()

    asyncio.run(main())


def rss_mb(pid: int) -> float:
    """Resident set size of a process, in MiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


async def direct_engine(turns: int, latency_s: float) -> list[float]:
    """Per-turn time of the bare engine (same latency, no HTTP, no rendering)."""
    from rollhub.sampling import SamplingParams
    from rollhub_gateway.engines.scripted import ScriptedBackend, ScriptedOptions

    backend = ScriptedBackend(options=ScriptedOptions(latency_s=latency_s))
    times = []
    for i in range(turns):
        backend.add(list(range(24)))
        t0 = time.perf_counter()
        await backend.generate(list(range(100 + i)), SamplingParams())
        times.append(time.perf_counter() - t0)
    return times


async def open_session(http: Any, url: str) -> dict[str, Any]:
    async with http.post(
        f"{url}/sessions", json={}, headers={"Authorization": "Bearer bench"}
    ) as r:
        r.raise_for_status()
        return await r.json()


async def agent_raw(
    http: Any, url: str, key: str, turns: int, lat: list[float] | None = None
) -> int:
    """One agent over raw HTTP: a growing conversation; returns the number of errors."""
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Question 0?"},
    ]
    errors = 0
    for i in range(turns):
        t0 = time.perf_counter()
        async with http.post(
            f"{url}/v1/chat/completions",
            json={"model": "m", "messages": messages, "max_tokens": 64},
            headers={"Authorization": f"Bearer {key}"},
        ) as r:
            body = await r.json()
            if r.status != 200:
                errors += 1
                continue
        if lat is not None:
            lat.append(time.perf_counter() - t0)
        messages += [
            body["choices"][0]["message"],
            {"role": "user", "content": f"Question {i + 1}?"},
        ]
    return errors


async def agent_sdk(url: str, key: str, turns: int, lat: list[float]) -> None:
    import openai

    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=key)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Question 0?"},
    ]
    for i in range(turns):
        t0 = time.perf_counter()
        r = await client.chat.completions.create(model="m", messages=messages, max_tokens=64)
        lat.append(time.perf_counter() - t0)
        messages += [
            r.choices[0].message.model_dump(exclude_none=True),
            {"role": "user", "content": f"Question {i + 1}?"},
        ]
    await client.close()


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


async def run(args: argparse.Namespace, url: str, pid: int) -> None:
    import aiohttp

    latency_s = args.latency_ms / 1000
    direct = await direct_engine(args.latency_turns, latency_s)
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(
        connector=conn, timeout=aiohttp.ClientTimeout(total=600)
    ) as http:
        raw: list[float] = []
        s = await open_session(http, url)
        await agent_raw(http, url, s["api_key"], args.latency_turns, raw)
        warm: list[float] = []  # the SDK's first call imports and builds its client
        await agent_sdk(url, (await open_session(http, url))["api_key"], 1, warm)
        sdk: list[float] = []
        s = await open_session(http, url)
        await agent_sdk(url, s["api_key"], args.latency_turns, sdk)
        med = statistics.median
        print(
            f"## Added latency per turn ({args.latency_turns} sequential turns, engine latency {args.latency_ms} ms)\n"
        )
        print("| path | median ms | p90 ms | added vs engine (median) |\n| --- | --- | --- | --- |")
        print(f"| engine direct | {med(direct) * 1e3:.2f} | {pct(direct, 0.9) * 1e3:.2f} | - |")
        print(
            f"| gateway, raw HTTP | {med(raw) * 1e3:.2f} | {pct(raw, 0.9) * 1e3:.2f} | {(med(raw) - med(direct)) * 1e3:.2f} ms |"
        )
        print(
            f"| gateway, openai SDK | {med(sdk) * 1e3:.2f} | {pct(sdk, 0.9) * 1e3:.2f} | {(med(sdk) - med(direct)) * 1e3:.2f} ms |"
        )

        rss0 = rss_mb(pid)
        t0 = time.perf_counter()
        sessions = await asyncio.gather(*(open_session(http, url) for _ in range(args.sessions)))
        t_open = time.perf_counter() - t0
        lat: list[float] = []
        t0 = time.perf_counter()
        results = await asyncio.gather(
            *(agent_raw(http, url, s["api_key"], args.turns, lat) for s in sessions),
            return_exceptions=True,
        )
        wall = time.perf_counter() - t0
        rss1 = rss_mb(pid)
        errors = sum(r if isinstance(r, int) else 1 for r in results)
        turns = len(lat)
        print(
            f"\n## {args.sessions} concurrent sessions x {args.turns} turns, one gateway process\n"
        )
        print(
            "| sessions | turns ok | errors | wall s | turns/s | p50 ms | p99 ms | open sessions/s |"
        )
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        print(
            f"| {args.sessions} | {turns} | {errors} | {wall:.1f} | {turns / wall:.0f} | "
            f"{pct(lat, 0.5) * 1e3:.0f} | {pct(lat, 0.99) * 1e3:.0f} | {args.sessions / t_open:.0f} |"
        )
        print(
            f"\n## Memory\n\nRSS {rss0:.0f} MiB → {rss1:.0f} MiB with {args.sessions} open sessions of {args.turns} turns: "
            f"{(rss1 - rss0) * 1024 / args.sessions:.1f} KiB per session"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--latency-turns", type=int, default=40)
    args = parser.parse_args()
    ctx = mp.get_context("spawn")
    port_q, stop_ev = ctx.Queue(), ctx.Event()
    proc = ctx.Process(target=_serve, args=(port_q, stop_ev, args.latency_ms / 1000), daemon=True)
    proc.start()
    try:
        url, pid = port_q.get(timeout=300)
        asyncio.run(run(args, url, pid))
    finally:
        stop_ev.set()
        proc.join(30)
        if proc.is_alive():
            proc.terminate()


if __name__ == "__main__":
    main()
