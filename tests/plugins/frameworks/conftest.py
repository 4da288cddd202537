"""Fixtures of the framework-adapter tests: a real rollhub gateway on 127.0.0.1 with the
scripted engine, a tools-aware ChatML template and the SmolLM2 tokenizer, and a rollout
config pointing at one of its sessions. The engine that records its calls and the checks
on what it recorded are in :mod:`tests.plugins.frameworks.recording_backend`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from rollhub.rollout import RolloutConfig
from rollhub_gateway.chat_model import build_chat_model
from rollhub_gateway.config import GatewayConfig
from rollhub_gateway.gateway import Gateway
from rollhub_gateway.http.serving import ThreadedGateway
from rollhub_gateway.models import load_tokenizer

from tests.plugins.frameworks.recording_backend import MODEL, TEMPLATE, RecordingBackend
from tests.scripted_ids import Ids


@pytest.fixture(scope="session")
def tokenizer() -> Any:
    return load_tokenizer(MODEL)


@pytest.fixture(scope="session")
def ids(tokenizer: Any) -> Ids:
    return Ids(tokenizer)


@pytest.fixture
def scripted() -> RecordingBackend:
    return RecordingBackend()


@pytest.fixture
def threaded(scripted: RecordingBackend, tokenizer: Any) -> Iterator[ThreadedGateway]:
    chat_model = build_chat_model(
        MODEL, chat_template=TEMPLATE.read_text(), family="hermes", tokenizer=tokenizer
    )
    config = GatewayConfig(admin_token="admin-secret", log_turns=False)
    with ThreadedGateway(Gateway(scripted, chat_model, config), host="127.0.0.1") as gw:
        yield gw


@pytest.fixture
def rollout(threaded: ThreadedGateway) -> RolloutConfig:
    """A ``_rollout`` for session ``s1`` of the gateway, as the trainer side would send."""
    session = threaded.open_session("s1")
    return RolloutConfig(
        exp_id="exp",
        input_id="q1",
        session_id="s1",
        result_store="file:///tmp/unused",
        base_url=threaded.base_url,
        api_key=session.key,
        model_id=MODEL,
        # top_k is not an OpenAI SDK keyword: it must travel in extra_body to get through
        sampling={"temperature": 0.7, "max_tokens": 128, "top_k": 20},
    )
