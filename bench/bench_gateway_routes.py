"""rollhub's gateway CPU per turn on its three model routes: Chat Completions, Anthropic
Messages and Responses.

Reproduce::

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_gateway_routes.py \\
        --plot docs/benchmarks/gateway-routes.png

The workload of ``bench_gateway_reference.py`` (same gateway process, tokenizer, template,
0 ms scripted engine and 64-turn tool sessions), sent in each route's own wire format over
raw HTTP, as that route's SDK sends it: an agent re-sends its whole conversation every
turn, the model's tool call in the route's shape (a Chat ``tool_calls`` message, an
Anthropic ``tool_use`` block, a Responses ``function_call`` item) and the tool's result
after it. Gateway CPU is read around each call (c=1), averaged per turn index over
``--sessions`` sessions. Exits 1 when a reply is not a tool call or a session's records
do not hold each sampled id exactly once.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).parent))
import bench_gateway_reference as ref
import bench_gateway_servers as wl

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROUTES = ("chat", "anthropic", "responses")
SHOWN_TURNS = (1, 16, 32, 64)


class Route:
    """One wire format: the request body of a turn and the tool call read from its reply."""

    path = "/v1/chat/completions"

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = wl.first_messages()

    def body(self) -> dict[str, Any]:
        return {"model": "m", "messages": self.items, "tools": wl.TOOLS, "max_tokens": 256}

    def answer(self, reply: dict[str, Any], result: str) -> bool:
        """Add the reply and the tool's result to the conversation; whether it was a call."""
        msg = {k: v for k, v in reply["choices"][0]["message"].items() if v is not None}
        calls = msg.get("tool_calls") or []
        self.items += [msg, {"role": "tool", "tool_call_id": _id(calls), "content": result}]
        return bool(calls)


class Anthropic(Route):
    path = "/v1/messages"

    def __init__(self) -> None:
        first = wl.first_messages()
        self.system = first[0]["content"]
        self.items = first[1:]
        self.tools = [
            {
                "name": t["function"]["name"],
                "description": t["function"]["description"],
                "input_schema": t["function"]["parameters"],
            }
            for t in wl.TOOLS
        ]

    def body(self) -> dict[str, Any]:
        return {
            "model": "m", "max_tokens": 256, "system": self.system,
            "messages": self.items, "tools": self.tools,
        }  # fmt: skip

    def answer(self, reply: dict[str, Any], result: str) -> bool:
        uses = [b for b in reply["content"] if b["type"] == "tool_use"]
        block = {"type": "tool_result", "tool_use_id": _id(uses), "content": result}
        self.items += [
            {"role": "assistant", "content": reply["content"]},
            {"role": "user", "content": [block]},
        ]
        return bool(uses)


class Responses(Route):
    path = "/v1/responses"

    def __init__(self) -> None:
        first = wl.first_messages()
        self.instructions = first[0]["content"]
        self.items = first[1:]
        self.tools = [{"type": "function", **t["function"]} for t in wl.TOOLS]

    def body(self) -> dict[str, Any]:
        return {
            "model": "m", "instructions": self.instructions, "input": self.items,
            "tools": self.tools, "max_output_tokens": 256,
        }  # fmt: skip

    def answer(self, reply: dict[str, Any], result: str) -> bool:
        calls = [o for o in reply["output"] if o["type"] == "function_call"]
        self.items += reply["output"]
        call_id = calls[0]["call_id"] if calls else "none"
        self.items.append({"type": "function_call_output", "call_id": call_id, "output": result})
        return bool(calls)


def _id(calls: list[dict[str, Any]]) -> str:
    return str(calls[0]["id"]) if calls else "none"


async def session(
    http: Any, srv: ref.Server, route: Route, turns: int, cpu: list[list[float]]
) -> int:
    """One tool session; returns how many replies were not tool calls."""
    sid, key = await srv.open(http)
    headers = {"Authorization": f"Bearer {key}", "x-api-key": key}
    texts = 0
    for i in range(turns):
        body = orjson.dumps(route.body())
        c0 = srv.cpu_s()
        async with http.post(f"{srv.url}{route.path}", data=body, headers=headers) as r:
            raw, status = await r.read(), r.status
        cpu[i].append(srv.cpu_s() - c0)
        if status != 200:
            raise RuntimeError(f"{route.path} turn {i}: HTTP {status}: {raw[:300]!r}")
        texts += not route.answer(orjson.loads(raw), wl.tool_result(i))
    records, sampled = await srv.finish(http, sid)
    if records != 1 or sampled != turns * len(ref.wl_output_ids()):
        raise RuntimeError(f"{route.path}: {records} records, {sampled} sampled ids")
    return texts


async def measure(srv: ref.Server, args: argparse.Namespace) -> dict[str, list[float]]:
    import aiohttp

    kinds = {"chat": Route, "anthropic": Anthropic, "responses": Responses}
    out: dict[str, list[float]] = {}
    async with aiohttp.ClientSession() as http:
        for name in args.routes:
            await session(http, srv, kinds[name](), args.turns, [[] for _ in range(args.turns)])
            cpu: list[list[float]] = [[] for _ in range(args.turns)]
            texts = 0
            for _ in range(args.sessions):
                texts += await session(http, srv, kinds[name](), args.turns, cpu)
            if texts:
                raise RuntimeError(f"{name}: {texts} replies were not tool calls")
            out[name] = [sum(c) / len(c) * 1e3 for c in cpu]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=64)
    parser.add_argument("--sessions", type=int, default=12, help="sequential sessions per route")
    parser.add_argument("--routes", nargs="+", choices=ROUTES, default=list(ROUTES))
    parser.add_argument("--plot", type=Path, help="write the CPU-per-turn plot here")
    args = parser.parse_args()
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        tok_dir = Path(tmp) / "tokenizer"
        ref.write_tokenizer(tok_dir)
        ref.wl_output_ids()
        srv = ref.Server("rollhub", sys.executable, tok_dir)
        try:
            results = asyncio.run(measure(srv, args))
        finally:
            srv.stop()
    print(f"load average at start / end: {load0:.2f} / {os.getloadavg()[0]:.2f}\n")
    print("| route | " + " | ".join(f"turn {t}" for t in SHOWN_TURNS) + " |")
    print("| --- |" + " --- |" * len(SHOWN_TURNS))
    for name, ys in results.items():
        shown = [f"{ys[t - 1]:.2f} ms" for t in SHOWN_TURNS if t <= len(ys)]
        print(f"| {name} | " + " | ".join(shown) + " |")
    if args.plot:  # one line per route, drawn as the reference benchmark draws its gateways
        ref.plot([{"gateway": k, "cpu_ms_per_turn": v} for k, v in results.items()], args.plot)


if __name__ == "__main__":
    main()
