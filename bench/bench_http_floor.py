"""The CPU floor of serving one gateway request in Python: a server that only reads the
request of turn 64 of ``bench_gateway_reference.py``'s tool session (15 KB of JSON),
decodes it and answers a fixed reply.

Reproduce::

    .venv/bin/python bench/bench_http_floor.py

Two servers, each in its own process, driven sequentially (c=1) over raw HTTP by this
process with the same body: an aiohttp application (as the reference gateway serves, and
as rollhub's gateway serves what its fast path hands over) and a bare asyncio protocol
(what the fast path is built on). Their CPU per request is what any gateway written on
them pays before doing any work of its own: the gap to the driver's own CPU per turn
(``bench_gateway_reference.py``) says how close to "driver-bound" one process can get.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).parent))
import bench_gateway_servers as wl

REPLY = orjson.dumps(
    {"id": "x", "choices": [{"message": {"role": "assistant", "content": None}}], "usage": {}}
)


def cpu_s(pid: int) -> float:
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except FileNotFoundError:
            pass
    return total / 1e9


async def serve_aiohttp() -> int:
    from aiohttp import web

    async def handle(request: web.Request) -> web.Response:
        orjson.loads(await request.read())
        return web.Response(body=REPLY, content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    assert site._server is not None
    return int(site._server.sockets[0].getsockname()[1])


class BareProtocol(asyncio.Protocol):
    """Content-Length requests only: enough for this measurement, nothing more."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport, self.buf = transport, b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = self.buf[:end].lower()
        n = int(head.split(b"content-length:")[1].split(b"\r\n")[0])
        if len(self.buf) < end + 4 + n:
            return
        orjson.loads(self.buf[end + 4 : end + 4 + n])
        self.buf = self.buf[end + 4 + n :]
        self.transport.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%b"
            % (len(REPLY), REPLY)
        )


async def serve_bare() -> int:
    server = await asyncio.get_running_loop().create_server(BareProtocol, "127.0.0.1", 0)
    return int(server.sockets[0].getsockname()[1])


async def child(which: str) -> None:
    port = await (serve_aiohttp() if which == "aiohttp" else serve_bare())
    print(port, os.getpid(), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


def turn_64_body() -> bytes:
    messages = wl.first_messages()
    for t in range(63):
        call = {"id": f"c{t}", "type": "function",
                "function": {"name": "search_docs", "arguments": '{"query": "retries"}'}}  # fmt: skip
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{t}", "content": wl.tool_result(t)},
        ]
    return orjson.dumps({"model": "m", "messages": messages, "tools": wl.TOOLS})


async def drive(which: str, requests: int) -> float:
    import aiohttp

    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", which],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdin is not None
    port, pid = (int(x) for x in proc.stdout.readline().split())
    body, url = turn_64_body(), f"http://127.0.0.1:{port}/v1/chat/completions"
    headers = {"Content-Type": "application/json"}
    try:
        async with aiohttp.ClientSession() as http:
            for _ in range(200):  # warm-up
                async with http.post(url, data=body, headers=headers) as r:
                    await r.read()
            c0 = cpu_s(pid)
            for _ in range(requests):
                async with http.post(url, data=body, headers=headers) as r:
                    await r.read()
            return (cpu_s(pid) - c0) / requests * 1e3
    finally:
        proc.stdin.close()
        proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", choices=["aiohttp", "bare"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        asyncio.run(child(args.child))
        return
    print(f"request body: {len(turn_64_body())} bytes; load average {os.getloadavg()[0]:.2f}\n")
    print("| server | CPU per request, each round |")
    print("| --- | --- |")
    for which in ("aiohttp", "bare"):
        ms = [asyncio.run(drive(which, args.requests)) for _ in range(args.rounds)]
        print(f"| {which} | " + " / ".join(f"{m:.3f} ms" for m in ms) + " |")


if __name__ == "__main__":
    main()
