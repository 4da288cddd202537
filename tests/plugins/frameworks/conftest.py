"""Fixtures of the framework-adapter tests: a real rollhub gateway on 127.0.0.1 with the
scripted engine, a tools-aware ChatML template and the SmolLM2 tokenizer, and a rollout
config pointing at one of its sessions."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rollhub.rollout import RolloutConfig
from rollhub_gateway.chat_model import build_chat_model
from rollhub_gateway.config import GatewayConfig
from rollhub_gateway.engines.scripted import ScriptedBackend, scripted_logprob
from rollhub_gateway.gateway import Gateway
from rollhub_gateway.http.serving import ThreadedGateway
from rollhub_gateway.models import load_tokenizer

from tests.scripted_ids import Ids

MODEL = "smollm2-135m-instruct"
TEMPLATE = Path(__file__).parents[3] / "examples" / "math" / "chatml_tools.jinja"


@pytest.fixture(scope="session")
def tokenizer() -> Any:
    return load_tokenizer(MODEL)


@pytest.fixture(scope="session")
def ids(tokenizer: Any) -> Ids:
    return Ids(tokenizer)


class RecordingBackend(ScriptedBackend):
    """The scripted engine, also noting how each call came in and with which parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, Any]] = []

    async def generate(self, prompt_ids: list[int], params: Any, *, turn: Any = None) -> Any:
        self.calls.append(("generate", params))
        return await super().generate(prompt_ids, params, turn=turn)

    def stream(self, prompt_ids: list[int], params: Any, *, turn: Any = None) -> Any:
        self.calls.append(("stream", params))
        return super().stream(prompt_ids, params, turn=turn)


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


def recorded(traces: list[Any]) -> list[tuple[list[int], list[float], str]]:
    """``(sampled ids, logprobs, drift)`` of every turn, in turn order."""
    out = {}
    for rec in traces:
        for t in rec.turns:
            out[t.turn_index] = (
                rec.response_ids[t.start : t.end],
                rec.response_logprobs[t.start : t.end],
                t.drift,
            )
    return [out[i] for i in sorted(out)]


def assert_two_turns(traces: list[Any], first: list[int], second: list[int]) -> None:
    """Both turns are recorded with the engine's exact ids and logprobs, the second appended."""
    turns = recorded(traces)
    assert [t[0] for t in turns] == [first, second]
    for got_ids, got_lps, _ in turns:
        assert got_lps == [scripted_logprob(i, tok) for i, tok in enumerate(got_ids)]
    assert turns[1][2] == "append"


def assert_sampling(scripted: RecordingBackend, mode: str) -> None:
    """Both calls came in as ``mode`` with the rollout's sampling parameters."""
    assert [m for m, _ in scripted.calls] == [mode, mode]
    for _, params in scripted.calls:
        assert (params.temperature, params.max_tokens, params.top_k) == (0.7, 128, 20)
