"""A big request never blocks the gateway: the model's context window is the default limit
(a 400 before any work when a request cannot fit), and big requests are decoded, rendered
and tokenised off the event loop while /healthz and other sessions carry on."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest
from rollhub_gateway.admission import OFFLOAD_BYTES
from rollhub_gateway.config import GatewayConfig
from rollhub_gateway.engines.scripted import ScriptedBackend
from rollhub_gateway.gateway import Gateway

SMALL = [{"role": "user", "content": "hi"}]


def _big_text(n_bytes: int) -> str:
    line = "The quick brown fox jumps over the lazy dog, sentence {}. "
    parts, size, i = [], 0, 0
    while size < n_bytes:
        parts.append(line.format(i))
        size += len(parts[-1])
        i += 1
    return "".join(parts)


async def _post(http, url, key, body, headers=None):
    t0 = time.perf_counter()
    async with http.post(url, data=json.dumps(body), headers={
        "Authorization": f"Bearer {key}", "Content-Type": "application/json", **(headers or {})
    }) as r:  # fmt: skip
        data = await r.json()
        return r.status, data, time.perf_counter() - t0


def test_the_model_config_gives_the_default_context(chat_model):
    assert chat_model.context_window == 8192  # SmolLM2's GGUF header


@pytest.mark.parametrize("proto", ["openai", "anthropic"])
async def test_a_10mb_request_is_400_before_any_work(gateway, scripted, ids, proto):
    s = gateway.open_session("big")
    body = {"model": "m", "max_tokens": 8, "messages": [
        {"role": "user", "content": _big_text(10 * 1024 * 1024)}]}  # fmt: skip
    path = "/v1/chat/completions" if proto == "openai" else "/v1/messages"
    async with aiohttp.ClientSession() as http:
        status, data, took = await _post(http, gateway.url + path, s.key, body)
    assert status == 400 and took < 5
    if proto == "openai":
        assert data["error"]["param"] == "messages"
        assert "max_context_tokens=8192" in data["error"]["message"]
    else:
        assert data["type"] == "error" and data["error"]["type"] == "invalid_request_error"
    assert scripted.prompts == []  # nothing was rendered or sampled
    # the session is still usable
    scripted.add(ids("ok"))
    async with aiohttp.ClientSession() as http:
        status, data, _ = await _post(
            http, gateway.base_url + "/chat/completions", s.key, {"messages": SMALL}
        )
    assert status == 200 and data["choices"][0]["message"]["content"] == "ok"


async def test_a_big_request_leaves_healthz_and_other_sessions_alone(chat_model, ids):
    """A ~3 MB prompt (about a million tokens, allowed by its session's policy) is prepared
    off the loop; meanwhile small calls of other sessions and /healthz keep their latency."""
    backend = ScriptedBackend(script=[ids("short")] * 5000)
    gw = Gateway(backend, chat_model, GatewayConfig(admin_token="a", log_turns=False))
    await gw.start()
    try:
        big = gw.open_session("big", policy={"max_context_tokens": 10**7})
        others = [gw.open_session(f"s{i}") for i in range(4)]
        url = gw.base_url + "/chat/completions"
        async with aiohttp.ClientSession() as http:

            async def small_calls(stop: asyncio.Event | None, n: int) -> list[float]:
                out = []
                for k in range(n):
                    if stop is not None and stop.is_set():
                        break
                    s = others[k % len(others)]
                    status, _, took = await _post(http, url, s.key, {"messages": SMALL})
                    assert status == 200
                    out.append(took)
                    await asyncio.sleep(0.01)  # an agent's own work between calls
                return out

            async def healthz(stop: asyncio.Event) -> list[float]:
                out = []
                while not stop.is_set():
                    t0 = time.perf_counter()
                    async with http.get(gw.url + "/healthz") as r:
                        assert r.status == 200
                    out.append(time.perf_counter() - t0)
                    await asyncio.sleep(0.02)
                return out

            baseline = sorted(await small_calls(None, 30))
            text = _big_text(3 * 1024 * 1024)
            assert len(text) > 10 * OFFLOAD_BYTES
            stop = asyncio.Event()
            big_call = asyncio.create_task(
                _post(http, url, big.key, {"messages": [{"role": "user", "content": text}]})
            )
            big_call.add_done_callback(lambda _: stop.set())
            during, pings = await asyncio.gather(small_calls(stop, 10_000), healthz(stop))
            status, data, took = await big_call
    finally:
        await gw.close()
    assert status == 200, data
    assert data["usage"]["prompt_tokens"] > 500_000
    during.sort()
    p99 = during[int(0.99 * (len(during) - 1))]
    base99 = baseline[int(0.99 * (len(baseline) - 1))]
    # the big call took seconds; others kept being served all along, at their usual pace
    assert took > 1 and len(during) >= 10, (took, len(during))
    # a loop blocked by the big call would stall them for about all of `took`; the bounds
    # are relative so a loaded machine does not fail a loop that never blocked
    assert max(pings) < max(0.5, took / 5), (max(pings), took)
    assert p99 < base99 + max(0.25, took / 10), (p99, base99, took)


async def test_count_tokens_of_a_big_prompt_is_counted_off_the_loop(gateway, chat_model):
    from rollhub_gateway.turns import ChatTurn

    s = gateway.open_session("c")
    text = _big_text(2 * OFFLOAD_BYTES)
    body = {"model": "m", "messages": [{"role": "user", "content": text}]}
    async with aiohttp.ClientSession() as http:
        status, data, _ = await _post(
            http, gateway.url + "/v1/messages/count_tokens", s.key, body,
            headers={"anthropic-version": "2023-06-01"},
        )  # fmt: skip
    assert status == 200
    want = chat_model.count_tokens(ChatTurn([{"role": "user", "content": text}]))
    assert data["input_tokens"] == want > 100_000
