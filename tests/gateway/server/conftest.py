"""Fixtures of the gateway HTTP-layer tests: a real SmolLM2 tokenizer and chat model, the
scripted engine for exact outputs, and gateways served on 127.0.0.1 (in the test's loop
for async clients, in a thread for sync clients)."""

from __future__ import annotations

import importlib.util
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from rollhub_gateway.chat_model import build_chat_model
from rollhub_gateway.config import GatewayConfig
from rollhub_gateway.engines.scripted import ScriptedBackend
from rollhub_gateway.gateway import Gateway
from rollhub_gateway.http.serving import ThreadedGateway
from rollhub_gateway.models import load_tokenizer

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


@pytest.fixture(scope="session")
def tokenizer() -> Any:
    return load_tokenizer("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def tools_template() -> str:
    """A real tools-aware ChatML template (Qwen2.5's, shipped in the trl wheel)."""
    spec = importlib.util.find_spec("trl")
    assert spec is not None and spec.origin is not None
    return (Path(spec.origin).parent / "chat_templates" / "qwen2_5.jinja").read_text()


@pytest.fixture
def chat_model(tokenizer: Any, tools_template: str) -> Any:
    return build_chat_model(
        "smollm2-135m-instruct", chat_template=tools_template, family="hermes", tokenizer=tokenizer
    )


class Ids:
    """Token ids of scripted outputs, written as text."""

    def __init__(self, tokenizer: Any) -> None:
        self.tok = tokenizer
        self.end = tokenizer.convert_tokens_to_ids("<|im_end|>")

    def __call__(self, text: str, *, end: bool = True) -> list[int]:
        ids = self.tok.encode(text, add_special_tokens=False)
        return [*ids, self.end] if end else ids

    def tool_call(self, name: str, args: dict[str, Any], text: str = "") -> list[int]:
        import json

        call = f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(args)}}}\n</tool_call>'
        return self(text + call)


@pytest.fixture(scope="session")
def ids(tokenizer: Any) -> Ids:
    return Ids(tokenizer)


@pytest.fixture
def scripted() -> ScriptedBackend:
    return ScriptedBackend()


@pytest.fixture
def config() -> GatewayConfig:
    return GatewayConfig(admin_token="admin-secret", log_turns=False)


@pytest.fixture
async def gateway(
    scripted: ScriptedBackend, chat_model: Any, config: GatewayConfig
) -> AsyncIterator[Gateway]:
    """A gateway served on the test's event loop (for async clients and raw aiohttp)."""
    gw = Gateway(scripted, chat_model, config)
    await gw.start()
    try:
        yield gw
    finally:
        await gw.close()


@pytest.fixture
def threaded(
    scripted: ScriptedBackend, chat_model: Any, config: GatewayConfig
) -> Iterator[ThreadedGateway]:
    """A gateway served from a background thread (for sync clients)."""
    with ThreadedGateway(Gateway(scripted, chat_model, config)) as gw:
        yield gw


def recorded_turns(traces: list[Any]) -> dict[int, tuple[list[int], list[float], str]]:
    """``turn index -> (sampled ids, logprobs, finish reason)`` over every trace record."""
    out = {}
    for rec in traces:
        for t in rec.turns:
            ids_ = rec.response_ids[t.start : t.end]
            assert rec.response_mask[t.start : t.end] == [1] * len(ids_)
            out[t.turn_index] = (ids_, rec.response_logprobs[t.start : t.end], t.finish_reason)
    return out


def assert_recorded(traces: list[Any], turn: int, engine_ids: list[int]) -> None:
    """The recorded turn holds exactly the engine's ids and their (scripted) logprobs."""
    from rollhub_gateway.engines.scripted import scripted_logprob

    got_ids, got_lps, _ = recorded_turns(traces)[turn]
    assert got_ids == engine_ids
    assert got_lps == [scripted_logprob(i, t) for i, t in enumerate(engine_ids)]


class Helpers:
    """Shared checks, handed to tests as the ``helpers`` fixture."""

    weather_tool = WEATHER_TOOL
    recorded_turns = staticmethod(recorded_turns)
    assert_recorded = staticmethod(assert_recorded)


@pytest.fixture
def helpers() -> type[Helpers]:
    return Helpers
