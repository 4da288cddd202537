"""Fixtures of the example tests: the real rollhub gateway on 127.0.0.1 with the scripted
engine, the math example's tools template and the SmolLM2 tokenizer."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from rollhub_gateway.chat_model import build_chat_model
from rollhub_gateway.config import GatewayConfig
from rollhub_gateway.engines.scripted import ScriptedBackend
from rollhub_gateway.gateway import Gateway
from rollhub_gateway.http.serving import ThreadedGateway
from rollhub_gateway.models import load_tokenizer

from tests.examples.math_example import MATH, MODEL
from tests.scripted_ids import Ids


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
