"""Fixtures of the example tests: the real rollhub gateway on 127.0.0.1 with the scripted
engine, the math example's tools template and the SmolLM2 tokenizer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rollhub_gateway.chat_model import build_chat_model
from rollhub_gateway.config import GatewayConfig
from rollhub_gateway.engines.scripted import ScriptedBackend
from rollhub_gateway.models import load_tokenizer
from rollhub_gateway.server import Gateway
from rollhub_gateway.serving import ThreadedGateway

MODEL = "smollm2-135m-instruct"
MATH = Path(__file__).parents[2] / "examples" / "math"


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
def tokenizer() -> Any:
    return load_tokenizer(MODEL)


@pytest.fixture(scope="session")
def ids(tokenizer: Any) -> Ids:
    return Ids(tokenizer)


@pytest.fixture
def scripted() -> ScriptedBackend:
    return ScriptedBackend()


@pytest.fixture
def gateway(scripted: ScriptedBackend, tokenizer: Any) -> Iterator[ThreadedGateway]:
    template = (MATH / "chatml_tools.jinja").read_text()
    chat_model = build_chat_model(
        MODEL, chat_template=template, family="hermes", tokenizer=tokenizer
    )
    config = GatewayConfig(admin_token="admin-secret", log_turns=False)
    with ThreadedGateway(Gateway(scripted, chat_model, config), host="127.0.0.1") as gw:
        yield gw
