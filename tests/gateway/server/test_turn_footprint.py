"""What a live session keeps and what a continued turn renders: each message once, template
forms only for the recent window, renders whose size does not grow with the session."""

from __future__ import annotations

import gc
import tracemalloc
from typing import Any

import aiohttp
from rollhub.sampling import Generation
from rollhub_gateway.chat_model import FORM_CACHE, build_chat_model
from rollhub_gateway.config import GatewayConfig
from rollhub_gateway.gateway import Gateway

from tests.gateway.server.tool_session import SYSTEM, RepeatEngine, tool_session

TURNS = 64


async def test_a_live_session_keeps_each_message_once(
    tokenizer: Any, tools_template: str, ids: Any, helpers: Any
) -> None:
    model = build_chat_model(
        "smollm2-135m-instruct", chat_template=tools_template, family="hermes", tokenizer=tokenizer
    )
    out = ids.tool_call("get_weather", {"city": "Paris"})
    gw = Gateway(
        RepeatEngine(out, lambda i: -0.5 - i / 64),
        model,
        GatewayConfig(admin_token="a", log_turns=False),
    )
    await gw.start()
    try:
        warm = gw.open_session("warm")  # first calls compile and cache lazily
        await tool_session(gw.url, warm.key, 2, helpers.weather_tool)
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.take_snapshot()
        session = gw.open_session("live")
        await tool_session(gw.url, session.key, TURNS, helpers.weather_tool)
        gc.collect()
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
        conv = session.conversation
        tip = conv.tree.branches[0].tip
        # the request the agent sent last and the session's history share every message:
        # our answers it re-sent are the session's own objects, not parsed copies
        assert len(tip.sent) == 2 * TURNS
        assert all(a is b for a, b in zip(tip.sent, tip.messages, strict=False))
        assert all(m.get("content") is None for m in tip.messages if m["role"] == "assistant")
        # template forms are kept for the recent window only
        assert 0 < len(conv._form_cache) <= FORM_CACHE
        # what the gateway allocated and still holds (the server's request buffers and
        # timers are not the session's): ids, exact logprobs, mask, 64 turn nodes, 130
        # messages once each, ~170 KiB (two forms of every message and the agent's copies
        # of our answers were ~60 KiB more)
        held = [tracemalloc.Filter(True, "*rollhub_gateway*"), tracemalloc.Filter(True, "*json*")]
        grown = sum(
            d.size_diff
            for d in after.filter_traces(held).compare_to(before.filter_traces(held), "filename")
        )
        print(f"a live {TURNS}-turn session holds {grown / 1024:.0f} KiB")
        assert grown < 176 * 1024, f"a live {TURNS}-turn session holds {grown / 1024:.0f} KiB"
        records = gw.finish_session("live")
    finally:
        await gw.close()
    (rec,) = records
    assert [t.drift for t in rec.turns] == ["append"] * TURNS
    for t in rec.turns:
        assert rec.response_ids[t.start : t.end] == out


def test_a_continued_turn_renders_a_window_of_the_same_size_at_any_turn(
    chat_model: Any, ids: Any, helpers: Any
) -> None:
    from rollhub_gateway.engines.scripted import scripted_logprob
    from rollhub_gateway.turns import ChatTurn

    r = chat_model.renderer
    assert r.windowed
    chat_model.verify_every = 10**6  # no whole-render check in this session
    sizes: list[list[int]] = []
    converted: list[int] = []
    real_render, real_form = r.render_text, r.family.to_template_message

    def render(messages: Any, tools: Any, *, generation: bool) -> str:
        sizes[-1].append(len(messages))
        return real_render(messages, tools, generation=generation)

    def form(message: Any) -> Any:
        converted.append(1)
        return real_form(message)

    r.render_text = render  # type: ignore[method-assign]
    r.family.to_template_message = form  # type: ignore[method-assign]
    try:
        conv = chat_model.new_conversation("window")
        msgs: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "q"}]
        tools = [helpers.weather_tool]
        per_turn = []
        for turn in range(40):
            sizes.append([])
            converted.clear()
            prep = conv.prepare(ChatTurn(list(msgs), tools=tools))
            per_turn.append(len(converted))
            out = ids.tool_call("get_weather", {"city": f"c{turn}"})
            gen = Generation(out, [scripted_logprob(i, t) for i, t in enumerate(out)], "stop")
            parsed = chat_model.parse(out)
            assert conv.commit(prep, gen, parsed) == "append"
            call = parsed.tool_calls[0]
            msgs += [
                {"role": "assistant", "tool_calls": [{"id": call.id, "type": "function",
                 "function": {"name": call.name, "arguments": call.arguments}}]},
                {"role": "tool", "tool_call_id": call.id, "content": f"{turn} C"},
            ]  # fmt: skip
    finally:
        del r.render_text, r.family.to_template_message
    # three renders a continued turn (prompt before our answer, through it, with the new
    # messages), each over the same few messages at turn 3 as at turn 40
    assert all(len(s) == 3 for s in sizes[3:])
    assert {tuple(s) for s in sizes[3:]} == {tuple(sizes[3])}
    assert max(sizes[3]) <= 7
    # only the messages a turn adds are put in template form: our answer of the turn
    # before (kept for the turns after it) and the agent's new tool result
    assert set(per_turn[3:]) == {2}


def test_a_resent_conversation_with_null_contents_is_reused_whole() -> None:
    from rollhub_gateway.protocols.openai_chat_input import parse_messages

    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    raw = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": None, "tool_calls": [call]},  # as SDKs send it
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
    ]
    first = parse_messages(raw)
    again = parse_messages([*raw, {"role": "user", "content": "next"}], known=first)
    assert all(a is b for a, b in zip(first, again, strict=False))
    assert again[4] == {"role": "user", "content": "next"}
    # an edit anywhere still re-parses from the edit on
    edited = [*raw[:3], {**raw[3], "content": "changed"}]
    out = parse_messages(edited, known=first)
    assert out[2] is first[2] and out[3] is not first[3] and out[3]["content"] == "changed"


def test_the_window_is_the_same_as_a_plain_scan_would_find() -> None:
    import random

    from rollhub_gateway.chat_templates.render import window

    def plain(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
        n_sys = 0
        while n_sys < len(history) and history[n_sys]["role"] == "system":
            n_sys += 1
        prev = [i for i in range(n_sys, len(history) - 1) if history[i]["role"] == "assistant"]
        if not prev:
            return history
        users = [i for i in range(n_sys, prev[-1]) if history[i]["role"] == "user"]
        anchor = [history[users[-1]]] if users else []
        return history[:n_sys] + anchor + history[prev[-1] :]

    rng = random.Random(7)
    roles = ["system", "user", "assistant", "tool"]
    for _ in range(2000):
        history = [{"role": rng.choice(roles), "i": i} for i in range(rng.randint(0, 12))]
        got, new = window(history, [{"role": "tool"}])
        assert got == plain(history) and new == [{"role": "tool"}]


def test_an_answer_sent_back_without_its_null_content_is_kept_as_sent() -> None:
    from rollhub_gateway.protocols.openai_chat_input import parse_messages

    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    raw = [{"role": "user", "content": "u"}, {"role": "assistant", "tool_calls": [call]}]
    first = parse_messages(raw)
    assert first == raw  # no content in neutral form either: it parses to itself
    tool = {"role": "tool", "tool_call_id": "c1", "content": "r"}
    again = parse_messages([*raw, tool], known=first)
    assert all(a is b for a, b in zip(first, again, strict=False)) and again[2] == tool


async def test_an_anthropic_session_keeps_each_message_once(
    gateway: Gateway, scripted: Any, ids: Any, helpers: Any
) -> None:
    tool = {
        "name": "get_weather",
        "description": "Current weather of a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
    outputs = [ids.tool_call("get_weather", {"city": f"c{i}"}) for i in range(4)]
    scripted.add(*outputs)
    session = gateway.open_session("anthropic")
    messages: list[dict[str, Any]] = [{"role": "user", "content": "weather?"}]
    async with aiohttp.ClientSession() as http:
        for i in range(4):
            async with http.post(
                f"{gateway.url}/v1/messages",
                json={"model": "m", "max_tokens": 64, "messages": messages, "tools": [tool]},
                headers={"x-api-key": session.key},
            ) as r:
                body = await r.json()
                assert r.status == 200, body
            use = next(b for b in body["content"] if b["type"] == "tool_use")
            result = {"type": "tool_result", "tool_use_id": use["id"], "content": f"{i} C"}
            messages += [
                {"role": "assistant", "content": body["content"]},
                {"role": "user", "content": [result]},
            ]
    tip = session.conversation.tree.branches[0].tip
    # every request is parsed afresh on this route; the session still holds one copy of
    # each message the agent sent (our answers are the session's own, by their meaning)
    shared = [a is b for a, b in zip(tip.sent, tip.messages, strict=False)]
    roles = [m["role"] for m in tip.sent]
    assert all(s for s, role in zip(shared, roles, strict=True) if role != "assistant")
    records = gateway.traces("anthropic")
    assert len(records) == 1 and [t.drift for t in records[0].turns] == ["append"] * 4
    for i, out in enumerate(outputs):
        helpers.assert_recorded(records, i, out)
