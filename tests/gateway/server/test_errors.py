"""Errors in each caller's wire format, with the statuses SDK retry logic expects."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import anthropic
import openai
import pytest
from rollhub.sampling import Generation, SamplingParams, TokenChunk
from rollhub_gateway.config import GatewayConfig
from rollhub_gateway.engines.scripted import ScriptedBackend
from rollhub_gateway.gateway import Gateway
from rollhub_gateway.sessions import SessionError

MESSAGES = [{"role": "user", "content": "hi"}]


def openai_client(gw, key, **kw):
    return openai.AsyncOpenAI(base_url=gw.base_url, api_key=key, max_retries=0, **kw)


def anthropic_client(gw, key, **kw):
    return anthropic.AsyncAnthropic(base_url=gw.url, api_key=key, max_retries=0, **kw)


async def call(proto: str, gw, key: str, *, stream: bool = False, **extra):
    """One model call in the given wire format; returns the response or raises."""
    if proto == "chat":
        r = await openai_client(gw, key).chat.completions.create(
            model="m", messages=MESSAGES, stream=stream, **extra
        )
    elif proto == "responses":
        r = await openai_client(gw, key).responses.create(
            model="m", input="hi", stream=stream, **extra
        )
    else:
        r = await anthropic_client(gw, key).messages.create(
            model="m", max_tokens=16, messages=MESSAGES, stream=stream, **extra
        )
    if stream:
        return [e async for e in r]
    return r


def assert_format(proto: str, body: dict, etype: str) -> None:
    if proto == "anthropic":
        assert (
            body["type"] == "error" and body["error"]["type"] == etype and body["error"]["message"]
        )
    else:
        assert set(body) >= {"message", "type", "param", "code"} and body["message"]


PROTOS = ["chat", "responses", "anthropic"]


@pytest.mark.parametrize("proto", PROTOS)
@pytest.mark.parametrize("key", ["sk-wrong", "rh-not-a-session"])
async def test_unknown_key_is_401(gateway, proto, key):
    gateway.open_session("s1")
    err = openai.AuthenticationError if proto != "anthropic" else anthropic.AuthenticationError
    with pytest.raises(err) as info:
        await call(proto, gateway, key)
    assert info.value.status_code == 401
    assert_format(proto, info.value.body, "authentication_error")


@pytest.mark.parametrize("proto", PROTOS)
async def test_closed_session_key_is_401(gateway, scripted, ids, proto):
    s = gateway.open_session("s1")
    scripted.add(ids("ok"))
    await call(proto, gateway, s.key)
    gateway.finish_session("s1")
    err = openai.AuthenticationError if proto != "anthropic" else anthropic.AuthenticationError
    with pytest.raises(err):
        await call(proto, gateway, s.key)


async def test_raw_401_without_any_key(gateway):
    async with aiohttp.ClientSession() as http:
        for path in (
            "/v1/chat/completions",
            "/v1/messages",
            "/v1/responses",
            "/v1/messages/count_tokens",
        ):
            async with http.post(gateway.url + path, json={}) as r:
                assert r.status == 401
                body = await r.json()
                assert "missing api key" in (body.get("error", {}).get("message", ""))


@pytest.mark.parametrize("proto", PROTOS)
@pytest.mark.parametrize("stream", [False, True])
async def test_engine_failure_is_502(gateway, proto, stream):
    s = gateway.open_session("s1")  # the scripted engine has no output left: it fails
    err = openai.InternalServerError if proto != "anthropic" else anthropic.InternalServerError
    with pytest.raises(err) as info:
        await call(proto, gateway, s.key, stream=stream)
    assert info.value.status_code == 502
    assert_format(proto, info.value.body, "api_error")
    assert "sampling backend 'scripted' failed" in str(info.value)
    assert_lost_with_nothing_recorded(gateway)


def assert_lost_with_nothing_recorded(gw: Gateway) -> None:
    """The failed call left no turn, and reading the session says the engine failed."""
    assert gw.sessions.get("s1").conversation.traces() == []
    with pytest.raises(SessionError, match="engine failed") as info:
        gw.traces("s1")
    assert info.value.context["reason"] == "engine_failed"


class FailsMidStream(ScriptedBackend):
    async def stream(
        self, prompt_ids: list[int], params: SamplingParams
    ) -> AsyncIterator[TokenChunk | Generation]:
        yield TokenChunk([28], [-0.1])
        raise RuntimeError("GPU fell off the bus")


@pytest.mark.parametrize("proto", PROTOS)
async def test_engine_failure_mid_stream_is_an_error_event(chat_model, config, proto):
    gw = Gateway(FailsMidStream(), chat_model, config)
    await gw.start()
    try:
        s = gw.open_session("s1")
        if proto == "responses":  # the SDK yields Responses error events instead of raising
            events = await call(proto, gw, s.key, stream=True)
            assert [e.type for e in events][-2:] == ["error", "response.failed"]
            assert "GPU fell off the bus" in events[-2].message
            assert events[-1].response.status == "failed"
        else:
            err = openai.APIError if proto == "chat" else anthropic.APIStatusError
            with pytest.raises(err) as info:
                await call(proto, gw, s.key, stream=True)
            assert "GPU fell off the bus" in str(info.value)
        assert_lost_with_nothing_recorded(gw)
    finally:
        await gw.close()


@pytest.mark.parametrize("proto", PROTOS)
async def test_body_too_large_is_413(chat_model, scripted, proto):
    gw = Gateway(
        scripted, chat_model, GatewayConfig(admin_token="a", max_body_bytes=4096, log_turns=False)
    )
    await gw.start()
    try:
        s = gw.open_session("s1")
        big = [{"role": "user", "content": "x" * 10_000}]
        with pytest.raises((openai.APIStatusError, anthropic.APIStatusError)) as info:
            if proto == "chat":
                await openai_client(gw, s.key).chat.completions.create(model="m", messages=big)
            elif proto == "responses":
                await openai_client(gw, s.key).responses.create(model="m", input=big)
            else:
                await anthropic_client(gw, s.key).messages.create(
                    model="m", max_tokens=5, messages=big
                )
        assert info.value.status_code == 413
        assert_format(proto, info.value.body, "request_too_large")
        assert "4096 bytes" in str(info.value)
    finally:
        await gw.close()


async def test_per_session_concurrency_is_429_with_retry_after(chat_model, ids):
    slow = ScriptedBackend(options=ScriptedBackend.Options(latency_s=1.5))
    gw = Gateway(
        slow,
        chat_model,
        GatewayConfig(admin_token="a", log_turns=False, policy={"max_concurrent_requests": 1}),
    )
    await gw.start()
    try:
        s = gw.open_session("s1")
        slow.add(ids("one"), ids("two"))
        first = asyncio.create_task(call("chat", gw, s.key))
        for _ in range(500):  # until the first call is in the engine
            if gw.sessions.get("s1").in_flight:
                break
            await asyncio.sleep(0.01)
        async with aiohttp.ClientSession() as http:
            async with http.post(
                gw.base_url + "/chat/completions", json={"model": "m", "messages": MESSAGES},
                headers={"Authorization": f"Bearer {s.key}"},
            ) as r:  # fmt: skip
                assert r.status == 429 and r.headers["Retry-After"] == "1"
                assert (await r.json())["error"]["type"] == "rate_limit_error"
        assert (await first).choices[0].message.content == "one"
    finally:
        await gw.close()


async def test_invalid_json_is_400(gateway):
    s = gateway.open_session("s1")
    async with aiohttp.ClientSession(headers={"x-api-key": s.key}) as http:
        async with http.post(gateway.url + "/v1/messages", data=b"{not json") as r:
            assert r.status == 400
            body = await r.json()
            assert (
                body["error"]["type"] == "invalid_request_error"
                and "not valid JSON" in body["error"]["message"]
            )


class BadLengths(ScriptedBackend):
    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Generation:
        return Generation([28, 29], [-0.5], "stop")  # one logprob short: cannot be traced


async def test_engine_output_that_cannot_be_recorded_is_502(chat_model, config):
    gw = Gateway(BadLengths(), chat_model, config)
    await gw.start()
    try:
        s = gw.open_session("s1")
        with pytest.raises(anthropic.InternalServerError) as info:
            await call("anthropic", gw, s.key)
        assert info.value.status_code == 502 and "logprobs" in str(info.value)
        assert_lost_with_nothing_recorded(gw)
    finally:
        await gw.close()


async def test_unexpected_failure_is_500_in_the_callers_format(gateway, monkeypatch):
    s = gateway.open_session("s1")

    def boom(*_a, **_k):
        raise KeyError("bug")

    monkeypatch.setattr(gateway.planner, "plan", boom)
    with pytest.raises(anthropic.InternalServerError) as info:
        await call("anthropic", gateway, s.key)
    assert info.value.status_code == 500 and info.value.body["error"]["type"] == "api_error"
