"""The agents' relay counts answered calls exactly when the agent can have its reply.

Upstream here is a small aiohttp server shaped like rllm-model-gateway's session routes: a
stream whose ``[DONE]`` event comes well before the connection ends, a plain reply and an
error reply.
"""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web
from rollhub_gateway.http.app_server import AppServer
from rollhub_rllm.relay import SessionRelay


async def _stream(request: web.Request) -> web.StreamResponse:
    out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await out.prepare(request)
    # the marker split over two writes, as it may arrive in two network reads
    await out.write(b'data: {"choices": []}\n\ndata: [DO')
    await out.write(b"NE]\n\n")
    await asyncio.sleep(1.0)  # the gateway ends its stream late (trace bookkeeping)
    await out.write_eof()
    return out


async def _chat(request: web.Request) -> web.Response:
    body = await request.json()
    if body.get("bad"):
        return web.json_response({"error": {"message": "bad"}}, status=400)
    return web.json_response({"choices": [{"message": {"content": "hi"}}]})


async def test_counts_a_stream_at_done_and_only_2xx_replies():
    app = web.Application()
    app.router.add_post("/sessions/{sid}/v1/chat/completions", _chat)
    app.router.add_post("/sessions/{sid}/v1/stream/completions", _stream)
    upstream = AppServer(app)
    relay = SessionRelay(await upstream.start())
    root = await relay.start()
    relay.open("s1")
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{root}/sessions/s1/v1/stream/completions", json={}) as resp:
                async for line in resp.content:
                    if line.startswith(b"data: [DONE]"):
                        break
            # the agent has its last event and hangs up: the call is already counted
            calls = relay.calls("s1")
            assert (calls.answered, calls.in_flight) == (1, 0)

            async with http.post(f"{root}/sessions/s1/v1/chat/completions", json={}) as resp:
                assert (await resp.json())["choices"][0]["message"]["content"] == "hi"
            async with http.post(
                f"{root}/sessions/s1/v1/chat/completions", json={"bad": True}
            ) as resp:
                assert resp.status == 400
            assert (calls.answered, calls.failed, calls.in_flight) == (2, 1, 0)

            async with http.post(f"{root}/sessions/nope/v1/chat/completions", json={}) as resp:
                assert resp.status == 404
                assert "no open capture session 'nope'" in await resp.text()
    finally:
        await relay.stop()
        await upstream.stop()
