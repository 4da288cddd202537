"""Anthropic Messages through the real anthropic SDK (base URL = the gateway root)."""

from __future__ import annotations

import anthropic
import pytest

WEATHER = {
    "name": "get_weather",
    "description": "Current weather of a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
USER = [{"role": "user", "content": "What is the weather in Paris?"}]


async def test_async_text_with_system_blocks(gateway, scripted, ids, helpers):
    s = gateway.open_session("s1")
    out = ids("It is sunny.")
    scripted.add(out)
    client = anthropic.AsyncAnthropic(base_url=gateway.url, api_key=s.key)
    m = await client.messages.create(
        model="claude-any", max_tokens=64, messages=USER,
        system=[{"type": "text", "text": "You are terse."}, {"type": "text", "text": "Answer in English."}],
    )  # fmt: skip
    assert [b.type for b in m.content] == ["text"] and m.content[0].text == "It is sunny."
    assert m.stop_reason == "end_turn"
    assert (m.usage.input_tokens, m.usage.output_tokens) == (len(scripted.prompts[0]), len(out))
    prompt_text = ids.tok.decode(scripted.prompts[0])
    assert "You are terse.\nAnswer in English." in prompt_text
    helpers.assert_recorded(gateway.traces("s1"), 0, out)


def test_sync_tool_use_round_trip(threaded, scripted, ids, helpers):
    s = threaded.open_session("s1")
    out = ids(
        "I will look it up.<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n<tool_call>\n'
        '{"name": "get_weather", "arguments": {"city": "Lyon"}}\n</tool_call>'
    )
    scripted.add(out, ids("Sunny in Paris, rain in Lyon."))
    client = anthropic.Anthropic(base_url=threaded.url, api_key=s.key)
    m = client.messages.create(model="m", max_tokens=200, messages=USER, tools=[WEATHER])
    assert m.stop_reason == "tool_use"
    assert [b.type for b in m.content] == ["text", "tool_use", "tool_use"]
    assert m.content[0].text == "I will look it up."
    assert [b.input for b in m.content[1:]] == [{"city": "Paris"}, {"city": "Lyon"}]
    helpers.assert_recorded(threaded.traces("s1"), 0, out)
    results = [
        {"type": "tool_result", "tool_use_id": b.id, "content": [{"type": "text", "text": r}]}
        for b, r in zip(m.content[1:], ["sunny", "rain"], strict=True)
    ]
    history = [
        *USER,
        {"role": "assistant", "content": m.content},
        {"role": "user", "content": results},
    ]
    m2 = client.messages.create(model="m", max_tokens=200, messages=history, tools=[WEATHER])
    assert m2.content[0].text == "Sunny in Paris, rain in Lyon."
    traces = threaded.traces("s1")
    assert len(traces) == 1 and [t.drift for t in traces[0].turns] == ["append", "append"]
    assert ids.tok.decode(scripted.prompts[1]).count("<tool_response>") == 2


async def test_async_stream_events_and_tool_use(gateway, scripted, ids, helpers):
    s = gateway.open_session("s1")
    out = ids.tool_call("get_weather", {"city": "Paris"}, "Checking the weather now. ")
    scripted.add(out)
    client = anthropic.AsyncAnthropic(base_url=gateway.url, api_key=s.key)
    kinds = []
    async with client.messages.stream(
        model="m", max_tokens=200, messages=USER, tools=[WEATHER]
    ) as stream:
        async for event in stream:
            kinds.append(event.type)
        final = await stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert kinds.count("text") > 2  # text arrives token by token
    assert "input_json" in kinds and kinds.count("content_block_stop") == 2
    assert [b.type for b in final.content] == ["text", "tool_use"]
    assert final.content[0].text.strip() == "Checking the weather now."
    assert final.content[1].input == {"city": "Paris"} and final.stop_reason == "tool_use"
    assert final.usage.output_tokens == len(out)
    helpers.assert_recorded(gateway.traces("s1"), 0, out)


def test_sync_stream_text(threaded, scripted, ids, helpers):
    s = threaded.open_session("s1")
    out = ids("Plain streamed answer.")
    scripted.add(out)
    client = anthropic.Anthropic(base_url=threaded.url, api_key=s.key)
    with client.messages.stream(model="m", max_tokens=50, messages=USER) as stream:
        text = "".join(stream.text_stream)
    assert text == "Plain streamed answer."
    helpers.assert_recorded(threaded.traces("s1"), 0, out)


async def test_count_tokens_is_the_real_count(gateway, chat_model):
    from rollhub_gateway.turns import ChatTurn

    s = gateway.open_session("s1")
    client = anthropic.AsyncAnthropic(base_url=gateway.url, api_key=s.key)
    r = await client.messages.count_tokens(
        model="m", messages=USER, system="Be brief.", tools=[WEATHER]
    )
    tools = [
        {
            "type": "function",
            "function": {
                "name": WEATHER["name"],
                "description": WEATHER["description"],
                "parameters": WEATHER["input_schema"],
            },
        }
    ]
    turn = ChatTurn([{"role": "system", "content": "Be brief."}, *USER], tools)
    assert r.input_tokens == chat_model.count_tokens(turn) > 50


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "image",
                                "source": {
                                    "type": "base64",
                                    "media_type": "image/png",
                                    "data": "AA==",
                                },
                            }
                        ],
                    }
                ]
            },
            "text-only model",
        ),
        ({"messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"tool_choice": {"type": "bogus"}}, "tool_choice"),
    ],
)
async def test_bad_requests_are_400(gateway, kwargs, fragment):
    s = gateway.open_session("s1")
    client = anthropic.AsyncAnthropic(base_url=gateway.url, api_key=s.key, max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as info:
        await client.messages.create(**{"model": "m", "max_tokens": 10, "messages": USER, **kwargs})
    assert info.value.body["type"] == "error"
    assert info.value.body["error"]["type"] == "invalid_request_error"
    assert fragment in info.value.body["error"]["message"]
