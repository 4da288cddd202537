"""Reasoning output (a Qwen3 template) in every wire format, and the tools gate of a
template that cannot render tools."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import anthropic
import openai
import pytest
from rollhub_gateway.chat_model import build_chat_model
from rollhub_gateway.config import GatewayConfig
from rollhub_gateway.gateway import Gateway

USER = [{"role": "user", "content": "What is 6 x 7?"}]
THOUGHT = "<think>\nSix sevens.\n</think>\n\nIt is 42."


@pytest.fixture
async def qwen3(scripted, tokenizer):
    template = (
        Path(importlib.util.find_spec("trl").origin).parent / "chat_templates" / "qwen3.jinja"
    ).read_text()
    model = build_chat_model("smollm2-135m-instruct", chat_template=template, tokenizer=tokenizer)
    assert model.family == "qwen3"
    gw = Gateway(scripted, model, GatewayConfig(admin_token="a", log_turns=False))
    await gw.start()
    try:
        yield gw
    finally:
        await gw.close()


async def test_reasoning_in_openai_chat(qwen3, scripted, ids, helpers):
    s = qwen3.open_session("s1")
    out = ids(THOUGHT)
    scripted.add(out, ids(THOUGHT))
    client = openai.AsyncOpenAI(base_url=qwen3.base_url, api_key=s.key)
    r = await client.chat.completions.create(model="m", messages=USER)
    msg = r.choices[0].message
    assert msg.content == "It is 42." and msg.model_extra["reasoning_content"] == "Six sevens."
    stream = await client.chat.completions.create(model="m", messages=USER, stream=True)
    chunks = [c async for c in stream]
    reasoning = "".join(
        c.choices[0].delta.model_extra.get("reasoning_content") or "" for c in chunks if c.choices
    )
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert (reasoning, content) == ("Six sevens.", "It is 42.")
    helpers.assert_recorded(qwen3.traces("s1"), 0, out)


async def test_reasoning_in_anthropic_thinking_blocks(qwen3, scripted, ids):
    s = qwen3.open_session("s1")
    scripted.add(ids(THOUGHT), ids(THOUGHT))
    client = anthropic.AsyncAnthropic(base_url=qwen3.url, api_key=s.key)
    m = await client.messages.create(model="m", max_tokens=64, messages=USER)
    assert [
        (b.type, getattr(b, "thinking", None) or getattr(b, "text", None)) for b in m.content
    ] == [
        ("thinking", "Six sevens."),
        ("text", "It is 42."),
    ]
    async with client.messages.stream(model="m", max_tokens=64, messages=USER) as stream:
        kinds = [e.type async for e in stream]
        final = await stream.get_final_message()
    assert "thinking" in kinds and [b.type for b in final.content] == ["thinking", "text"]
    assert final.content[0].thinking == "Six sevens." and final.content[1].text == "It is 42."
    # a thinking block sent back is read as the assistant's reasoning
    history = [
        *USER,
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
        *USER,
    ]
    scripted.add(ids("Still 42."))
    await client.messages.create(model="m", max_tokens=64, messages=history)


async def test_reasoning_in_responses(qwen3, scripted, ids):
    s = qwen3.open_session("s1")
    scripted.add(ids(THOUGHT), ids(THOUGHT))
    client = openai.AsyncOpenAI(base_url=qwen3.base_url, api_key=s.key)
    r = await client.responses.create(model="m", input="What is 6 x 7?")
    assert [o.type for o in r.output] == ["reasoning", "message"] and r.output_text == "It is 42."
    async with client.responses.stream(model="m", input="What is 6 x 7?") as stream:
        kinds = [e.type async for e in stream]
        final = await stream.get_final_response()
    assert "response.reasoning_text.delta" in kinds and final.output_text == "It is 42."


async def test_tools_for_a_template_without_tools_are_400_before_sampling(
    scripted, tokenizer, config, helpers
):
    plain = build_chat_model("smollm2-135m-instruct", tokenizer=tokenizer)  # the GGUF's ChatML
    assert not plain.supports_tools()
    gw = Gateway(scripted, plain, config)
    await gw.start()
    try:
        s = gw.open_session("s1")
        client = openai.AsyncOpenAI(base_url=gw.base_url, api_key=s.key, max_retries=0)
        with pytest.raises(openai.BadRequestError) as info:
            await client.chat.completions.create(
                model="m", messages=USER, tools=[helpers.weather_tool]
            )
        assert info.value.body["param"] == "tools" and "chat_template" in info.value.body["message"]
        assert scripted.prompts == []
    finally:
        await gw.close()
