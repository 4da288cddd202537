"""True streaming: tokens reach the caller as the engine produces them; a caller that
leaves aborts the engine request and commits nothing."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest
from rollhub_gateway.config import GatewayConfig
from rollhub_gateway.engines.scripted import ScriptedBackend, ScriptedOptions
from rollhub_gateway.gateway import Gateway

USER = [{"role": "user", "content": "count"}]
ROUTES = {
    "chat": ("/v1/chat/completions", {"model": "m", "messages": USER, "stream": True}),
    "responses": ("/v1/responses", {"model": "m", "input": "count", "stream": True}),
    "anthropic": (
        "/v1/messages",
        {"model": "m", "max_tokens": 200, "messages": USER, "stream": True},
    ),
}


@pytest.fixture
async def slow_gateway(chat_model):
    backend = ScriptedBackend(options=ScriptedOptions(token_delay_s=0.03))
    gw = Gateway(backend, chat_model, GatewayConfig(admin_token="a", log_turns=False))
    await gw.start()
    try:
        yield gw, backend
    finally:
        await gw.close()


def text_of(proto: str, payload: dict) -> str:
    if proto == "chat":
        return "".join(c["delta"].get("content") or "" for c in payload.get("choices", []))
    if proto == "responses":
        return (
            payload.get("delta", "") if payload.get("type") == "response.output_text.delta" else ""
        )
    return (
        payload.get("delta", {}).get("text", "")
        if payload.get("type") == "content_block_delta"
        else ""
    )


@pytest.mark.parametrize("proto", list(ROUTES))
async def test_first_tokens_arrive_before_generation_ends(slow_gateway, ids, proto):
    gw, backend = slow_gateway
    s = gw.open_session("s1")
    out = ids(" ".join(str(i) for i in range(20)))  # ~40 tokens: ~1.2 s of generation
    backend.add(out)
    path, body = ROUTES[proto]
    arrivals: list[float] = []
    text = ""
    t0 = time.perf_counter()
    async with aiohttp.ClientSession(headers={"x-api-key": s.key}) as http:
        async with http.post(gw.url + path, json=body) as r:
            assert r.status == 200 and r.headers["Content-Type"].startswith("text/event-stream")
            async for line in r.content:
                if line.startswith(b"data: {"):
                    piece = text_of(proto, json.loads(line[6:]))
                    if piece:
                        arrivals.append(time.perf_counter() - t0)
                        text += piece
    total = time.perf_counter() - t0
    assert text == " ".join(str(i) for i in range(20))
    assert len(arrivals) > 10
    assert arrivals[0] < total / 3  # the first text came long before the last token
    assert backend.aborted == 0 and len(gw.traces("s1")[0].response_ids) == len(out)


@pytest.mark.parametrize("proto", list(ROUTES))
async def test_client_disconnect_aborts_the_engine_request(slow_gateway, ids, proto):
    gw, backend = slow_gateway
    s = gw.open_session("s1")
    backend.add(ids(" ".join(str(i) for i in range(100))))  # ~6 s if nobody stopped it
    path, body = ROUTES[proto]
    t0 = time.perf_counter()
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {s.key}"}) as http:
        async with http.post(gw.url + path, json=body) as r:
            seen = 0
            async for line in r.content:
                if line.startswith(b"data: {") and text_of(proto, json.loads(line[6:])):
                    seen += 1
                    if seen == 3:
                        break
            r.connection.transport.abort()  # the agent process dies mid-answer
    for _ in range(100):
        if backend.aborted:
            break
        await asyncio.sleep(0.02)
    assert backend.aborted == 1
    assert time.perf_counter() - t0 < 3
    assert gw.traces("s1") == []  # nothing the agent never saw is recorded
    assert gw.sessions.get("s1").in_flight == 0
    assert gw.metrics.aborted_streams == 1


async def test_non_streaming_disconnect_cancels_generation(chat_model, ids):
    backend = ScriptedBackend(options=ScriptedOptions(latency_s=1.0))
    gw = Gateway(backend, chat_model, GatewayConfig(admin_token="a", log_turns=False))
    await gw.start()
    try:
        s = gw.open_session("s1")
        backend.add(ids("late"))
        async with aiohttp.ClientSession(headers={"x-api-key": s.key}) as http:
            with pytest.raises(asyncio.TimeoutError):
                async with http.post(
                    gw.base_url + "/chat/completions", json={"model": "m", "messages": USER},
                    timeout=aiohttp.ClientTimeout(total=0.2),
                ):  # fmt: skip
                    pass
        await asyncio.sleep(1.2)
        assert gw.traces("s1") == [] and gw.sessions.get("s1").in_flight == 0
    finally:
        await gw.close()
