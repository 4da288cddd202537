"""End to end with the real embedded engine: SmolLM2-135M on CPU behind every protocol.

Greedy decoding makes the engine deterministic, so the recorded ids can be checked against
a direct engine call on the recorded prompt.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import anthropic
import openai
import pytest
from rollhub.sampling import SamplingParams
from rollhub_gateway.config import GatewayConfig
from rollhub_gateway.engines.transformers_engine import TransformersBackend, TransformersOptions
from rollhub_gateway.gateway import Gateway

pytestmark = pytest.mark.slow
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="session")
def engine() -> Iterator[TransformersBackend]:
    """The real engine, loaded once (≈12 s); its worker thread serves every test's loop."""
    backend = TransformersBackend(TransformersOptions(max_batch_size=4, threads=2))
    backend._load()
    yield backend
    assert backend.engine is not None
    backend.engine.stop()


@pytest.fixture
async def real(engine, chat_model) -> AsyncIterator[Gateway]:
    gw = Gateway(
        engine,
        chat_model,
        GatewayConfig(admin_token="a", log_turns=False, policy={"temperature": 0.0}),
    )
    await gw.start()
    try:
        yield gw
    finally:
        await gw.stop()  # the engine outlives the gateway: it is shared by the session


async def check_against_engine(
    gw: Gateway, engine: TransformersBackend, sid: str, text: str, *, direct_call: bool = False
) -> list[int]:
    """The recorded turn decodes to what the caller got; with ``direct_call``, it also holds
    the ids and logprobs a direct greedy engine call gives for the recorded prompt."""
    (rec,) = gw.traces(sid)
    (turn,) = rec.turns
    ids = rec.response_ids[turn.start : turn.end]
    assert (
        gw.chat_model.renderer.tokenizer.decode(ids, skip_special_tokens=True).strip()
        == text.strip()
    )
    assert len(rec.response_logprobs) == len(ids) and all(lp <= 0 for lp in rec.response_logprobs)
    if not direct_call:
        return ids
    direct = await engine.generate(
        rec.prompt_ids,
        SamplingParams(
            max_tokens=len(ids),
            temperature=0.0,
            stop_token_ids=tuple(gw.chat_model.stop_token_ids()),
        ),
    )
    assert direct.token_ids == ids
    assert rec.response_logprobs[turn.start : turn.end] == pytest.approx(direct.logprobs, abs=1e-3)
    return ids


async def test_openai_chat_with_logprobs(real, engine):
    s = real.open_session("s1")
    client = openai.AsyncOpenAI(base_url=real.base_url, api_key=s.key)
    r = await client.chat.completions.create(
        model="smollm2-135m-instruct", messages=QUESTION, max_tokens=10, logprobs=True
    )
    text = r.choices[0].message.content
    assert "Paris" in text
    ids = await check_against_engine(real, engine, "s1", text, direct_call=True)
    assert [c.logprob for c in r.choices[0].logprobs.content] == real.traces("s1")[
        0
    ].response_logprobs
    assert len(ids) == r.usage.completion_tokens


async def test_openai_responses_streaming(real, engine):
    s = real.open_session("s1")
    client = openai.AsyncOpenAI(base_url=real.base_url, api_key=s.key)
    async with client.responses.stream(
        model="m", input=QUESTION[0]["content"], max_output_tokens=8
    ) as stream:
        deltas = [e.delta async for e in stream if e.type == "response.output_text.delta"]
        final = await stream.get_final_response()
    assert len(deltas) > 1 and "".join(deltas) == final.output_text
    await check_against_engine(real, engine, "s1", final.output_text)


async def test_anthropic_messages_streaming(real, engine):
    s = real.open_session("s1")
    client = anthropic.AsyncAnthropic(base_url=real.url, api_key=s.key)
    async with client.messages.stream(
        model="m", max_tokens=8, messages=QUESTION, system="Answer briefly."
    ) as stream:
        text = "".join([t async for t in stream.text_stream])
        final = await stream.get_final_message()
    assert text == final.content[0].text and text
    await check_against_engine(real, engine, "s1", text)
