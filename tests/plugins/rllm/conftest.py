"""Fixtures of the rLLM tests: a real rollhub gateway with the scripted engine, made to
answer like vLLM (:mod:`tests.plugins.rllm.vllm_upstream`), as the engine behind a real
``rllm-model-gateway`` that the ``rllm`` token source starts."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from rollhub_gateway.chat_model import build_chat_model
from rollhub_gateway.config import GatewayConfig
from rollhub_gateway.engines.scripted import ScriptedBackend
from rollhub_gateway.models import load_tokenizer
from rollhub_gateway.server import Gateway
from rollhub_gateway.serving import ThreadedGateway
from rollhub_rllm.token_source import RllmSourceOptions, RllmTokenSource

from tests.plugins.rllm.vllm_upstream import VllmStyleUpstream

MODEL = "smollm2-135m-instruct"
TEMPLATE = Path(__file__).parents[3] / "examples" / "math" / "chatml_tools.jinja"


class Ids:
    """Token ids of scripted outputs, written as text (Hermes-style tool calls)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tok = tokenizer
        self.end = tokenizer.convert_tokens_to_ids("<|im_end|>")

    def text(self, text: str) -> list[int]:
        return [*self.tok.encode(text, add_special_tokens=False), self.end]

    def tool_call(self, name: str, args: dict[str, Any]) -> list[int]:
        body = json.dumps({"name": name, "arguments": args})
        return self.text(f"<tool_call>\n{body}\n</tool_call>")


@pytest.fixture(scope="session")
def ids() -> Ids:
    return Ids(load_tokenizer(MODEL))


@pytest.fixture
def scripted() -> ScriptedBackend:
    return ScriptedBackend()


@pytest.fixture
def upstream(scripted: ScriptedBackend, ids: Ids) -> Iterator[VllmStyleUpstream]:
    """The engine rllm-model-gateway sits in front of."""
    chat_model = build_chat_model(
        MODEL, chat_template=TEMPLATE.read_text(), family="hermes", tokenizer=ids.tok
    )
    gateway = Gateway(scripted, chat_model, GatewayConfig(log_turns=False))
    with ThreadedGateway(gateway, host="127.0.0.1") as threaded:
        up = VllmStyleUpstream(gateway)
        threaded.call(up.start())
        try:
            yield up
        finally:
            threaded.call(up.stop())


def source_options(upstream: VllmStyleUpstream, **options: Any) -> dict[str, Any]:
    """``[token_source]`` options of an rllm source in front of ``upstream``."""
    return {"engine_url": f"{upstream.url}/v1", "model": MODEL, **options}


@pytest.fixture
async def source(upstream: VllmStyleUpstream) -> AsyncIterator[RllmTokenSource]:
    """A started rllm token source whose gateway writes every trace asynchronously."""
    src = RllmTokenSource(RllmSourceOptions(**source_options(upstream, sync_traces=False)))
    await src.start()
    try:
        yield src
    finally:
        await src.close()
