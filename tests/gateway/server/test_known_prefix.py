"""Anthropic and Responses calls parse only the items an agent added since its last call
(the re-sent ones are taken from that call), and give exactly what a whole parse gives."""

from __future__ import annotations

import copy
import json
from typing import Any

import anthropic
import openai
import pytest
from rollhub_gateway.protocols import anthropic_input as anthropic_wire
from rollhub_gateway.protocols import openai_responses_input as responses_wire
from rollhub_gateway.protocols.anthropic import AnthropicMessages
from rollhub_gateway.protocols.openai_responses import OpenAIResponses

WEATHER = {
    "name": "get_weather",
    "description": "Current weather of a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
FN = {"type": "function", "name": "get_weather", "parameters": WEATHER["input_schema"]}


def _count_calls(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[int]:
    calls = [0]
    real = getattr(module, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def _shares_history(session: Any) -> bool:
    """Whether the last call's neutral messages are the session's own objects."""
    tip = session.conversation.tree.branches[0].tip
    sent = session.last_parse[1].turn.messages
    return all(a is b for a, b in zip(sent, tip.messages, strict=False))


def _assert_appended_exactly(traces: list[Any], outs: list[list[int]], helpers: Any) -> None:
    """One record, every turn appended, each turn's sampled ids recorded exactly."""
    assert len(traces) == 1 and [t.drift for t in traces[0].turns] == ["append"] * len(outs)
    for i, out in enumerate(outs):
        helpers.assert_recorded(traces, i, out)


async def test_anthropic_tool_loop_parses_only_new_messages(
    gateway: Any, scripted: Any, ids: Any, helpers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    turns = 6
    outs = [ids.tool_call("get_weather", {"city": f"c{i}"}) for i in range(turns)]
    scripted.add(*outs)
    parsed = _count_calls(monkeypatch, anthropic_wire, "_assistant")
    session = gateway.open_session("a")
    client = anthropic.AsyncAnthropic(base_url=gateway.url, api_key=session.key)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "weather?"}]
    per_call = []
    for i in range(turns):
        before = parsed[0]
        m = await client.messages.create(
            model="m", max_tokens=64, system="Use tools.", messages=messages, tools=[WEATHER]
        )
        per_call.append(parsed[0] - before)
        assert m.stop_reason == "tool_use"
        use = m.content[-1]
        messages += [
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": use.id, "content": f"{i} C"}],
            },
        ]
        assert _shares_history(session)
    # each call parses the one assistant message it re-sends for the first time
    assert per_call == [0] + [1] * (turns - 1)
    _assert_appended_exactly(gateway.traces("a"), outs, helpers)


async def test_responses_tool_loop_parses_only_new_items(
    gateway: Any, scripted: Any, ids: Any, helpers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    turns = 6
    outs = [
        ids.tool_call("get_weather", {"city": f"c{i}"}, "Checking. " if i % 2 else "")
        for i in range(turns)
    ]
    scripted.add(*outs)
    parsed = _count_calls(monkeypatch, responses_wire, "function_call")
    session = gateway.open_session("r")
    client = openai.AsyncOpenAI(base_url=gateway.base_url, api_key=session.key)
    items: list[dict[str, Any]] = [{"role": "user", "content": "weather?"}]
    per_call = []
    for i in range(turns):
        before = parsed[0]
        r = await client.responses.create(
            model="m", instructions="Use tools.", input=items, tools=[FN]
        )
        per_call.append(parsed[0] - before)
        (call,) = [o for o in r.output if o.type == "function_call"]
        items += [o.model_dump(exclude_none=True) for o in r.output]
        items.append({"type": "function_call_output", "call_id": call.call_id, "output": f"{i}"})
        assert _shares_history(session)
    assert per_call == [0] + [1] * (turns - 1)
    _assert_appended_exactly(gateway.traces("r"), outs, helpers)


def _call(i: int) -> dict[str, Any]:
    args = json.dumps({"city": f"c{i}"})
    return {"type": "function_call", "call_id": f"k{i}", "name": "get_weather", "arguments": args}


def _output(i: int) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": f"k{i}", "output": "sunny"}


def _assistant_text(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text}],
    }


USER = {"role": "user", "content": "q"}


@pytest.mark.parametrize(
    ("first", "added", "reused"),
    [
        # a function_call joins the assistant message before it, which was the last item:
        # resume before that message (instructions and user message reused)
        ([USER, _assistant_text("Let me see.")], [_call(0), _output(0)], 2),
        # a reasoning item's text waits for the assistant message after it
        ([USER, {"type": "reasoning", "summary": [{"text": "hm"}]}], [_call(1), _output(1)], 2),
        # the usual case: resume after a tool output, everything reused
        ([USER, _call(2), _output(2)], [_call(3), _output(3)], 4),
    ],
)
def test_responses_resumes_only_where_a_whole_parse_would_agree(
    first: list[dict[str, Any]], added: list[dict[str, Any]], reused: int
) -> None:
    wire = OpenAIResponses()
    prev = wire.parse({"model": "m", "instructions": "s", "input": first})
    kept = copy.deepcopy(prev.turn.messages)
    again = wire.parse(
        {"model": "m", "instructions": "s", "input": first + added}, known=prev.known
    )
    whole = wire.parse({"model": "m", "instructions": "s", "input": first + added})
    assert again.turn.messages == whole.turn.messages
    assert again.known.ends == whole.known.ends
    assert prev.turn.messages == kept  # the previous call's messages were not changed
    # what was reused is the previous call's own objects
    shared = [a is b for a, b in zip(again.turn.messages, prev.turn.messages, strict=False)]
    assert shared == [True] * reused + [False] * (len(shared) - reused)


def test_anthropic_edits_and_a_new_system_prompt_are_parsed_afresh() -> None:
    wire = AnthropicMessages()
    items = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [{"type": "text", "text": "a"}]},
        {"role": "user", "content": [{"type": "text", "text": "more"}]},
    ]
    body = {"model": "m", "max_tokens": 8, "system": "s", "messages": items}
    prev = wire.parse(body)
    edited = [items[0], {"role": "assistant", "content": "changed"}, items[2]]
    again = wire.parse({**body, "messages": edited}, known=prev.known)
    assert again.turn.messages == wire.parse({**body, "messages": edited}).turn.messages
    assert again.turn.messages[:2] == prev.turn.messages[:2]
    assert [a is b for a, b in zip(again.turn.messages, prev.turn.messages, strict=True)] == [
        True, True, False, False,
    ]  # fmt: skip
    other = wire.parse({**body, "system": "t"}, known=prev.known)
    assert other.turn.messages[0] == {"role": "system", "content": "t"}
    assert not any(a is b for a, b in zip(other.turn.messages, prev.turn.messages, strict=True))
    # a count_tokens call keeps nothing
    assert wire.parse(body, count_only=True).known is None
