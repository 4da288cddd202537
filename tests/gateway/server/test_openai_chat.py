"""OpenAI Chat Completions through the real openai SDK (sync, async, streaming, tools)."""

from __future__ import annotations

import json

import openai
import pytest
from rollhub_gateway.engines.scripted import scripted_logprob

USER = [{"role": "user", "content": "What is the weather in Paris?"}]


async def test_async_text_with_logprobs(gateway, scripted, ids, helpers):
    s = gateway.open_session("s1")
    out = ids("It is sunny.")
    scripted.add(out)
    client = openai.AsyncOpenAI(base_url=gateway.base_url, api_key=s.key)
    r = await client.chat.completions.create(
        model="any", messages=USER, logprobs=True, top_logprobs=2
    )
    choice = r.choices[0]
    assert choice.message.content == "It is sunny."
    assert choice.finish_reason == "stop"
    assert [c.logprob for c in choice.logprobs.content] == [
        scripted_logprob(i, t) for i, t in enumerate(out)
    ]
    assert "".join(c.token for c in choice.logprobs.content[:-1]) == "It is sunny."
    assert r.usage.completion_tokens == len(out)
    assert r.usage.prompt_tokens == len(scripted.prompts[0])
    assert r.model == "smollm2-135m-instruct"
    helpers.assert_recorded(gateway.traces("s1"), 0, out)


def test_sync_parallel_tool_calls_keep_text(threaded, scripted, ids, helpers):
    s = threaded.open_session("s1")
    text = "Checking both. "
    calls = (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>'
    )
    out = ids(text + calls)
    scripted.add(out)
    client = openai.OpenAI(base_url=threaded.base_url, api_key=s.key)
    r = client.chat.completions.create(
        model="m", messages=USER, tools=[helpers.weather_tool], tool_choice="auto"
    )
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls"
    assert msg.content.strip() == text.strip()
    assert [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_weather", {"city": "Rome"}),
    ]
    helpers.assert_recorded(threaded.traces("s1"), 0, out)
    # the agent answers the calls: the next prompt extends the recorded ids (append)
    scripted.add(ids("Sunny in both."))
    follow = [
        *USER,
        msg.model_dump(exclude_none=True),
        *({"role": "tool", "tool_call_id": c.id, "content": "sunny"} for c in msg.tool_calls),
    ]
    r2 = client.chat.completions.create(model="m", messages=follow, tools=[helpers.weather_tool])
    assert r2.choices[0].message.content == "Sunny in both."
    traces = threaded.traces("s1")
    assert len(traces) == 1 and [t.drift for t in traces[0].turns] == ["append", "append"]
    assert scripted.prompts[1][: len(scripted.prompts[0]) + len(out)] == scripted.prompts[0] + out


async def test_async_stream_tool_call_and_usage(gateway, scripted, ids, helpers):
    s = gateway.open_session("s1")
    out = ids.tool_call("get_weather", {"city": "Paris"}, "Let me check. ")
    scripted.add(out)
    client = openai.AsyncOpenAI(base_url=gateway.base_url, api_key=s.key)
    stream = await client.chat.completions.create(
        model="m", messages=USER, tools=[helpers.weather_tool], stream=True,
        stream_options={"include_usage": True}, logprobs=True,
    )  # fmt: skip
    chunks = [c async for c in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert text.strip() == "Let me check."
    assert (
        len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 2
    )  # token by token
    assert [(d.function.name, json.loads(d.function.arguments)) for d in deltas] == [
        ("get_weather", {"city": "Paris"})
    ]
    assert chunks[-2].choices[0].finish_reason == "tool_calls"
    lps = chunks[-2].choices[0].logprobs.content
    assert [x.logprob for x in lps] == [scripted_logprob(i, t) for i, t in enumerate(out)]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == len(out)
    helpers.assert_recorded(gateway.traces("s1"), 0, out)


def test_sync_stream_text(threaded, scripted, ids, helpers):
    s = threaded.open_session("s1")
    out = ids("One two three four.")
    scripted.add(out)
    client = openai.OpenAI(base_url=threaded.base_url, api_key=s.key)
    with client.chat.completions.stream(model="m", messages=USER) as stream:
        final = stream.get_final_completion()
    assert final.choices[0].message.content == "One two three four."
    helpers.assert_recorded(threaded.traces("s1"), 0, out)


async def test_sampling_fields_reach_the_engine(gateway, scripted, ids, helpers):
    seen = []
    scripted.add(lambda prompt: seen.append(prompt) or ids("ok"))
    original = scripted.generate

    async def spy(prompt_ids, params, **kw):
        seen.append(params)
        return await original(prompt_ids, params, **kw)

    scripted.generate = spy
    s = gateway.open_session("s1")
    client = openai.AsyncOpenAI(base_url=gateway.base_url, api_key=s.key)
    await client.chat.completions.create(
        model="m", messages=USER, max_completion_tokens=7, temperature=0.3, top_p=0.9,
        seed=11, stop=["\n\n"],
    )  # fmt: skip
    params = seen[0]
    assert (params.max_tokens, params.temperature, params.top_p, params.seed, params.stop) == (
        7,
        0.3,
        0.9,
        11,
        ("\n\n",),
    )
    assert 2 in params.stop_token_ids  # <|im_end|> ends the turn


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"n": 2}, "n"),
        ({"temperature": 5}, "temperature"),
        ({"max_tokens": "ten"}, "max_tokens"),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
                ]
            },
            "messages[0].content",
        ),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
        ({"tools": [{"type": "function"}]}, "tools[0]"),
    ],
)
async def test_bad_fields_are_400_naming_the_field(gateway, extra, param, helpers):
    s = gateway.open_session("s1")
    client = openai.AsyncOpenAI(base_url=gateway.base_url, api_key=s.key, max_retries=0)
    with pytest.raises(openai.BadRequestError) as info:
        await client.chat.completions.create(**{"model": "m", "messages": USER, **extra})
    assert info.value.status_code == 400
    assert info.value.body["param"] == param
    assert info.value.body["type"] == "invalid_request_error"
    assert helpers.recorded_turns(gateway.traces("s1")) == {}


@pytest.mark.parametrize("stream", [False, True])
async def test_malformed_tool_call_comes_back_as_text_and_is_flagged(
    gateway, scripted, ids, helpers, stream
):
    # The model opened a tool call and wrote broken JSON: the caller gets the text (200, no
    # tool calls), and the recorded turn keeps every sampled id, flagged ill_formed.
    s = gateway.open_session("bad")
    raw = 'Let me call it. <tool_call>\n{"name": "get_weather", "arguments": {"city": Paris}\n</tool_call>'
    out = ids(raw)
    scripted.add(out)
    client = openai.AsyncOpenAI(base_url=gateway.base_url, api_key=s.key)
    if stream:
        chunks = [
            c
            async for c in await client.chat.completions.create(
                model="m", messages=USER, tools=[helpers.weather_tool], stream=True
            )
        ]
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
    else:
        r = await client.chat.completions.create(
            model="m", messages=USER, tools=[helpers.weather_tool]
        )
        assert not r.choices[0].message.tool_calls
        text = r.choices[0].message.content
    assert "get_weather" in text and "Paris" in text
    traces = gateway.traces("bad")
    helpers.assert_recorded(traces, 0, out)
    assert traces[0].turns[0].ill_formed is True
