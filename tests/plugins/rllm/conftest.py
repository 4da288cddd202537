"""Fixtures of the rLLM tests: a real rollhub gateway with the scripted engine, made to
answer like vLLM (:mod:`tests.plugins.rllm.vllm_upstream`), as the engine behind a real
``rllm-model-gateway`` that the ``rllm`` token source starts."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from rollhub_gateway.chat_model import build_chat_model
from rollhub_gateway.config import GatewayConfig
from rollhub_gateway.engines.scripted import ScriptedBackend
from rollhub_gateway.gateway import Gateway
from rollhub_gateway.http.serving import ThreadedGateway
from rollhub_gateway.models import load_tokenizer
from rollhub_rllm.token_source import RllmSourceOptions, RllmTokenSource

from tests.plugins.rllm.rllm_source import MODEL, TEMPLATE, source_options
from tests.plugins.rllm.vllm_upstream import VllmStyleUpstream
from tests.scripted_ids import Ids


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


@pytest.fixture
async def source(upstream: VllmStyleUpstream) -> AsyncIterator[RllmTokenSource]:
    """A started rllm token source whose gateway writes every trace asynchronously."""
    src = RllmTokenSource(RllmSourceOptions(**source_options(upstream, sync_traces=False)))
    await src.start()
    try:
        yield src
    finally:
        await src.close()
