"""Hostile or malformed model calls: each is a 400 that names the field at fault (never a
500, a hang, or a call that samples something other than what was asked), and the session
serves its next valid call."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest
from rollhub_gateway.gateway import Gateway

USER = [{"role": "user", "content": "hi"}]
ROUTES = {
    "chat": "/v1/chat/completions",
    "anthropic": "/v1/messages",
    "responses": "/v1/responses",
    "count_tokens": "/v1/messages/count_tokens",
}
#: a minimal valid body per route, as JSON text, so numbers JSON has no spelling for
#: (NaN, Infinity) can be spliced in as the raw bytes an attacker sends
BODIES = {
    "chat": '{"model":"m","messages":[{"role":"user","content":"hi"}]%s}',
    "anthropic": '{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]%s}',
    "responses": '{"model":"m","input":"hi"%s}',
    "count_tokens": '{"model":"m","messages":[{"role":"user","content":"hi"}]%s}',
}


async def post(gw: Gateway, key: str, proto: str, raw: bytes) -> tuple[int, dict[str, Any]]:
    """One raw call; ``(status, the error object)`` (empty on success)."""
    headers = {
        "Authorization": f"Bearer {key}",
        "x-api-key": key,
        "Content-Type": "application/json",
    }
    async with (
        aiohttp.ClientSession(headers=headers) as http,
        http.post(gw.url + ROUTES[proto], data=raw) as r,
    ):
        body = await r.json(content_type=None)
        return r.status, body.get("error", {}) if r.status >= 400 else {}


def body(proto: str, extra: str = "") -> bytes:
    return (BODIES[proto] % ("," + extra if extra else "")).encode()


def assert_names(error: dict[str, Any], proto: str, field: str) -> None:
    """The error names ``field`` (OpenAI formats also in ``param``)."""
    assert field in error["message"], error
    if proto in ("chat", "responses"):
        assert error["param"] is not None and field in error["param"], error


async def still_serves(gw: Gateway, scripted: Any, ids: Any, key: str) -> None:
    scripted.add(ids("fine"))
    status, _ = await post(gw, key, "chat", body("chat"))
    assert status == 200


@pytest.mark.parametrize(
    ("proto", "field", "value"),
    [
        ("chat", "temperature", "NaN"),
        ("chat", "temperature", "Infinity"),
        ("chat", "temperature", "1e400"),  # read as inf by a JSON decoder
        ("chat", "top_p", "NaN"),
        ("chat", "top_p", "-Infinity"),
        ("anthropic", "temperature", "NaN"),
        ("anthropic", "top_p", "NaN"),
        ("responses", "temperature", "NaN"),
        ("responses", "top_p", "Infinity"),
    ],
)
async def test_non_finite_sampling_numbers_are_400_naming_the_field(
    gateway: Gateway, scripted: Any, ids: Any, proto: str, field: str, value: str
) -> None:
    key = gateway.open_session("s").key
    status, error = await post(gateway, key, proto, body(proto, f'"{field}":{value}'))
    assert status == 400
    assert_names(error, proto, field)
    assert "finite" in error["message"]
    await still_serves(gateway, scripted, ids, key)


@pytest.mark.parametrize("proto", ["chat", "anthropic", "responses"])
async def test_top_p_zero_is_400_as_the_session_policy_refuses_it(
    gateway: Gateway, proto: str
) -> None:
    key = gateway.open_session("s").key
    status, error = await post(gateway, key, proto, body(proto, '"top_p":0'))
    assert status == 400
    assert_names(error, proto, "top_p")
    assert "(0, 1]" in error["message"]


async def test_an_integer_too_large_for_a_float_is_400_not_500(gateway: Gateway) -> None:
    key = gateway.open_session("s").key
    status, error = await post(gateway, key, "chat", body("chat", '"temperature":1' + "0" * 400))
    assert status == 400
    assert_names(error, "chat", "temperature")


@pytest.mark.parametrize(
    ("proto", "extra", "field"),
    [
        ("chat", '"stop":[""]', "stop"),
        ("chat", '"stop":""', "stop"),
        ("chat", '"stop":["END",""]', "stop"),
        ("anthropic", '"stop_sequences":[""]', "stop_sequences"),
    ],
)
async def test_an_empty_stop_string_is_400(
    gateway: Gateway, proto: str, extra: str, field: str
) -> None:
    key = gateway.open_session("s").key
    status, error = await post(gateway, key, proto, body(proto, extra))
    assert status == 400
    assert_names(error, proto, field)
    assert "empty" in error["message"]


@pytest.mark.parametrize("proto", list(ROUTES))
async def test_a_lone_surrogate_is_400(
    gateway: Gateway, scripted: Any, ids: Any, proto: str
) -> None:
    key = gateway.open_session("s").key
    raw = body(proto).replace(b'"hi"', b'"hi \\ud800"')
    status, error = await post(gateway, key, proto, raw)
    assert status == 400
    assert "surrogate" in error["message"]
    await still_serves(gateway, scripted, ids, key)


@pytest.mark.parametrize("proto", ["chat", "anthropic"])
async def test_deeply_nested_json_is_400(
    gateway: Gateway, scripted: Any, ids: Any, proto: str
) -> None:
    key = gateway.open_session("s").key
    for raw in (
        b"[" * 100_000 + b"]" * 100_000,
        body(proto, '"metadata":' + "[" * 5000 + "]" * 5000),
    ):
        status, error = await post(gateway, key, proto, raw)
        assert status == 400
        assert "nested" in error["message"]
    await still_serves(gateway, scripted, ids, key)


TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


@pytest.mark.parametrize(
    ("proto", "extra", "field"),
    [
        ("chat", {"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "zzz"}}}, "tool_choice"),
        ("chat", {"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": 5}}}, "tool_choice"),
        ("chat", {"tool_choice": {"type": "function", "function": {"name": "f"}}}, "tool_choice"),
        ("chat", {"tools": [TOOL], "tool_choice": {"type": "nonsense"}}, "tool_choice"),
        ("anthropic", {"tools": [{"name": "f"}], "tool_choice": {"type": "tool", "name": "zzz"}}, "tool_choice"),
        ("responses", {"tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "function", "name": "zzz"}}, "tool_choice"),
        ("chat", {"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]}, "tools[0].function.parameters"),
        ("chat", {"tools": [{"type": "function", "function": {"name": "f", "parameters": [1]}}]}, "tools[0].function.parameters"),
        ("chat", {"tools": [{"type": "function", "function": {"name": "f", "description": {"a": 1}}}]}, "tools[0].function.description"),
        ("anthropic", {"tools": [{"name": "f", "input_schema": "x"}]}, "tools[0].input_schema"),
        ("count_tokens", {"tools": [{"name": "f", "input_schema": 5}]}, "tools[0].input_schema"),
        ("responses", {"tools": [{"type": "function", "name": "f", "parameters": 5}]}, "tools[0].parameters"),
        ("chat", {"model": 5}, "model"),
        ("chat", {"logit_bias": {"50256": -100}}, "logit_bias"),
        ("chat", {"logit_bias": "x"}, "logit_bias"),
        ("anthropic", {"model": ["m"]}, "model"),
        ("responses", {"model": {"id": "m"}}, "model"),
    ],
)  # fmt: skip
async def test_tool_and_model_fields_of_the_wrong_shape_are_400(
    gateway: Gateway, proto: str, extra: dict[str, Any], field: str
) -> None:
    key = gateway.open_session("s").key
    raw = json.dumps({**json.loads(body(proto)), **extra}).encode()
    status, error = await post(gateway, key, proto, raw)
    assert status == 400
    assert_names(error, proto, field)


async def test_a_tool_choice_naming_a_declared_tool_and_an_empty_logit_bias_are_served(
    gateway: Gateway, scripted: Any, ids: Any
) -> None:
    key = gateway.open_session("s").key
    scripted.add(ids("ok"))
    choice = {"type": "function", "function": {"name": "f"}}
    raw = json.dumps(
        {"model": "m", "messages": USER, "tools": [TOOL], "tool_choice": choice, "logit_bias": {}}
    )
    status, _ = await post(gateway, key, "chat", raw.encode())
    assert status == 200


@pytest.mark.parametrize(
    ("field", "value"), [("temperature", "Infinity"), ("temperature", "NaN"), ("top_p", "NaN")]
)
async def test_a_session_policy_with_a_non_finite_number_is_400(
    gateway: Gateway, field: str, value: str
) -> None:
    raw = f'{{"policy": {{"{field}": {value}}}}}'.encode()
    headers = {"Authorization": "Bearer admin-secret", "Content-Type": "application/json"}
    async with (
        aiohttp.ClientSession(headers=headers) as http,
        http.post(gateway.url + "/sessions", data=raw) as r,
    ):
        assert r.status == 400
        assert (await r.json())["error"]["param"] == f"policy.{field}"
