"""OpenAI Responses through the real openai SDK (text, function tools, streaming)."""

from __future__ import annotations

import json

import openai
import pytest

TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather of a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


async def test_async_text(gateway, scripted, ids, helpers):
    s = gateway.open_session("s1")
    out = ids("Hello from the gateway.")
    scripted.add(out)
    client = openai.AsyncOpenAI(base_url=gateway.base_url, api_key=s.key)
    r = await client.responses.create(
        model="m", input="Say hello", instructions="Be kind.", max_output_tokens=40
    )
    assert r.output_text == "Hello from the gateway."
    assert r.status == "completed" and r.usage.output_tokens == len(out)
    assert "Be kind." in ids.tok.decode(scripted.prompts[0])
    helpers.assert_recorded(gateway.traces("s1"), 0, out)


def test_sync_function_calls_and_round_trip(threaded, scripted, ids, helpers):
    s = threaded.open_session("s1")
    out = ids(
        "Two lookups.<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n<tool_call>\n'
        '{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    )
    scripted.add(out, ids("Done."))
    client = openai.OpenAI(base_url=threaded.base_url, api_key=s.key)
    r = client.responses.create(
        model="m", input=[{"role": "user", "content": "Weather?"}], tools=[TOOL]
    )
    calls = [o for o in r.output if o.type == "function_call"]
    assert [json.loads(c.arguments) for c in calls] == [{"city": "Paris"}, {"city": "Oslo"}]
    assert r.output_text == "Two lookups."
    helpers.assert_recorded(threaded.traces("s1"), 0, out)
    follow = [
        {"role": "user", "content": "Weather?"},
        *[o.model_dump(exclude_none=True) for o in r.output],
        *({"type": "function_call_output", "call_id": c.call_id, "output": "cold"} for c in calls),
    ]
    r2 = client.responses.create(model="m", input=follow, tools=[TOOL])
    assert r2.output_text == "Done."
    traces = threaded.traces("s1")
    assert len(traces) == 1 and [t.drift for t in traces[0].turns] == ["append", "append"]


async def test_async_stream_with_function_call(gateway, scripted, ids, helpers):
    s = gateway.open_session("s1")
    out = ids.tool_call("get_weather", {"city": "Paris"}, "Let me see. ")
    scripted.add(out)
    client = openai.AsyncOpenAI(base_url=gateway.base_url, api_key=s.key)
    kinds = []
    async with client.responses.stream(
        model="m", input="Weather in Paris?", tools=[TOOL]
    ) as stream:
        async for event in stream:
            kinds.append(event.type)
        final = await stream.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert kinds.count("response.output_text.delta") > 2
    assert final.output_text.strip() == "Let me see."
    call = next(o for o in final.output if o.type == "function_call")
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Paris"})
    helpers.assert_recorded(gateway.traces("s1"), 0, out)


def test_sync_stream_text_and_length_limit(threaded, scripted, ids, helpers):
    s = threaded.open_session("s1")
    out = ids("a b c d e f g h", end=False)
    scripted.add(out)
    client = openai.OpenAI(base_url=threaded.base_url, api_key=s.key)
    with client.responses.stream(model="m", input="letters", max_output_tokens=4) as stream:
        final = stream.get_final_response()
    assert final.status == "incomplete" and final.incomplete_details.reason == "max_output_tokens"
    helpers.assert_recorded(threaded.traces("s1"), 0, out[:4])


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input[0].content",
        ),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ],
)
async def test_bad_requests_are_400(gateway, kwargs, param):
    s = gateway.open_session("s1")
    client = openai.AsyncOpenAI(base_url=gateway.base_url, api_key=s.key, max_retries=0)
    with pytest.raises(openai.BadRequestError) as info:
        await client.responses.create(**{"model": "m", "input": "hi", **kwargs})
    assert info.value.body["param"] == param
