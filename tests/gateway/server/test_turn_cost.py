"""What keeps a turn cheap must keep it exact: records built once, reused messages, compact
storage, shared prompt prefixes, direct tokenizer calls."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from rollhub.sampling import Generation
from rollhub_gateway.chat_model import build_chat_model
from rollhub_gateway.config import GatewayConfig
from rollhub_gateway.families.base import IncrementalDecoder
from rollhub_gateway.gateway import Gateway
from rollhub_gateway.protocols.openai_chat import OpenAIChat
from rollhub_gateway.protocols.openai_chat_input import parse_messages
from rollhub_gateway.token_codec import BatchDecoder, TokenCodec
from rollhub_gateway.trajectory import TrajectoryTree

from tests.gateway.server.tool_session import SYSTEM, RepeatEngine, tool_session


async def test_finish_builds_records_once(
    gateway: Gateway, scripted: Any, ids: Any, helpers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []
    real = TrajectoryTree.records

    def counted(self: TrajectoryTree) -> Any:
        calls.append(self.session_id)
        return real(self)

    monkeypatch.setattr(TrajectoryTree, "records", counted)
    outputs = [ids.tool_call("get_weather", {"city": f"c{i}"}) for i in range(3)]
    scripted.add(*outputs)
    session = gateway.open_session("once")
    await tool_session(gateway.url, session.key, 3, helpers.weather_tool)
    records = gateway.finish_session("once")
    assert calls == ["once"]
    assert len(records) == 1 and [t.drift for t in records[0].turns] == ["append"] * 3
    for i, out in enumerate(outputs):
        helpers.assert_recorded(records, i, out)


def _exact(i: int) -> float:
    """A logprob whose float64 bits a float32 store would change."""
    return -(0.1 + 0.2) * (i + 1) / 3.0


async def test_compact_storage_keeps_exact_ids_and_logprobs(
    chat_model: Any, ids: Any, helpers: Any
) -> None:
    out = ids.tool_call("get_weather", {"city": "Paris"})
    gw = Gateway(
        RepeatEngine(out, _exact), chat_model, GatewayConfig(admin_token="a", log_turns=False)
    )
    await gw.start()
    try:
        session = gw.open_session("exact")
        await tool_session(gw.url, session.key, 4, helpers.weather_tool)
        branch = session.conversation.tree.branches[0]
        assert (branch.ids.typecode, branch.logprobs.typecode) == ("i", "d")
        records = gw.finish_session("exact")
    finally:
        await gw.close()
    (rec,) = records
    want = [_exact(i) for i in range(len(out))]
    for t in rec.turns:
        got = rec.response_logprobs[t.start : t.end]
        assert [struct.pack("<d", x) for x in got] == [struct.pack("<d", x) for x in want]
        assert rec.response_ids[t.start : t.end] == out
    assert all(type(x) is int for x in rec.prompt_ids + rec.response_ids + rec.response_mask)
    assert rec.model_dump(mode="json")["response_logprobs"][:2] == want[:2]


def test_unchanged_messages_are_reused_and_parse_to_themselves() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    raw = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "tool_calls": [call]},  # content dropped, as SDKs send it back
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
        {"role": "assistant", "content": "ok", "reasoning_content": "why"},
    ]
    first = parse_messages(raw)
    again = parse_messages([*raw, {"role": "user", "content": "next"}], known=first)
    assert all(a is b for a, b in zip(first, again[:5], strict=True))
    assert again == parse_messages([*raw, {"role": "user", "content": "next"}])
    # a message in neutral form parses to itself, so reusing it is exact
    assert parse_messages(first) == first
    # an edited message and everything after it are parsed afresh
    edited = [raw[0], {"role": "user", "content": "changed"}, *raw[2:]]
    out = parse_messages(edited, known=first)
    assert out[0] is first[0] and out[1] == {"role": "user", "content": "changed"}
    assert all(a is not b for a, b in zip(first[1:], out[1:], strict=True))
    # a differently shaped message (developer role, arguments as an object) is not reused
    other = [{"role": "developer", "content": "s"}]
    assert parse_messages(other, known=first) == [{"role": "system", "content": "s"}]
    dict_args = {**call, "function": {"name": "f", "arguments": {"a": 1}}}
    msgs = [raw[0], raw[1], {"role": "assistant", "tool_calls": [dict_args]}]
    assert parse_messages(msgs, known=first)[2]["tool_calls"][0]["function"]["arguments"] == (
        '{"a": 1}'
    )


def test_openai_parse_reuses_the_known_turn() -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    body = {"model": "m", "messages": [{"role": "user", "content": "u"}], "tools": [tool]}
    first = OpenAIChat().parse(body).turn
    second = OpenAIChat().parse(body, known=first).turn
    assert second.tools is first.tools and second.messages[0] is first.messages[0]


def test_shared_prompt_prefix_ids_equal_a_whole_encoding(chat_model: Any, helpers: Any) -> None:
    r = chat_model.renderer
    tools = [helpers.weather_tool]
    key = "k"
    seen = []
    real = r.codec.encode

    def spy(text: str) -> list[int]:
        seen.append(len(text))
        return real(text)

    r.codec.encode = spy  # type: ignore[method-assign]
    for user in ("weather in Paris?", "and Oslo", " leading space", "<|im_start|>odd"):
        msgs = r.template_messages([SYSTEM, {"role": "user", "content": user}])
        text = r.render_text(msgs, tools, generation=True)
        seen.clear()
        assert r.encode_prompt(text, msgs, tools, key) == real(text)
        if user != "weather in Paris?":  # cached: only the text after the prefix is encoded
            assert seen and max(seen) < len(text) - len(SYSTEM["content"])
    assert len(r._prefix_ids) == 1


def test_direct_tokenizer_and_batch_decoder_match_the_wrapper(tokenizer: Any) -> None:
    codec = TokenCodec(tokenizer)
    assert codec.direct
    text = 'naïve 東京 🚀🚀 <|im_start|>user\n  spaced\tout {"a": [1, 2]}<|im_end|>'
    assert codec.encode(text) == tokenizer.encode(text, add_special_tokens=False)
    ids = tokenizer.encode(text, add_special_tokens=False)
    stop = {tokenizer.convert_tokens_to_ids("<|im_end|>")}
    whole, by_one = BatchDecoder(codec, stop), IncrementalDecoder(tokenizer, stop)
    whole.feed(ids[:-3])
    for i in ids[:-3]:
        by_one.feed([i])
    assert whole.text == by_one.text
    for i in ids[-3:]:  # streamed chunks after a batch go on as if fed one by one
        assert whole.feed([i]) == by_one.feed([i])
    assert whole.final_text() == by_one.final_text() == tokenizer.decode(ids[:-1])


def test_prefix_cache_is_bounded(tokenizer: Any, tools_template: str, helpers: Any) -> None:
    from rollhub_gateway.chat_templates.render import PREFIX_CACHE

    model = build_chat_model(
        "smollm2-135m-instruct", chat_template=tools_template, family="hermes", tokenizer=tokenizer
    )
    r = model.renderer
    for i in range(PREFIX_CACHE + 5):
        msgs = [{"role": "system", "content": f"sys {i}"}, {"role": "user", "content": "u"}]
        text = r.render_text(msgs, None, generation=True)
        assert r.encode_prompt(text, msgs, None, "[]") == r.encode(text)
    assert len(r._prefix_ids) <= PREFIX_CACHE and len(r._prefix_texts) <= PREFIX_CACHE


@pytest.mark.parametrize(("every", "checked"), [(2, [2, 6, 14]), (1, list(range(1, 21)))])
def test_whole_render_checks_are_spaced_as_the_session_grows(
    chat_model: Any, ids: Any, every: int, checked: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    from rollhub_gateway.engines.scripted import scripted_logprob
    from rollhub_gateway.turns import ChatTurn

    r = chat_model.renderer
    assert r.windowed
    chat_model.verify_every = every
    whole: list[int] = []
    real = type(r).texts

    def spy(self: Any, *args: Any, windowed: bool) -> Any:
        if not windowed:
            whole.append(turn)
        return real(self, *args, windowed=windowed)

    monkeypatch.setattr(type(r), "texts", spy)
    conv = chat_model.new_conversation("spaced")
    msgs: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "q0"}]
    for turn in range(21):
        prep = conv.prepare(ChatTurn(list(msgs)))
        out = ids(f"a{turn}")
        gen = Generation(out, [scripted_logprob(i, t) for i, t in enumerate(out)], "stop")
        assert conv.commit(prep, gen, chat_model.parse(out)) == "append"
        msgs += [{"role": "assistant", "content": f"a{turn}"}, {"role": "user", "content": "q"}]
    assert whole == checked
    assert len(conv.traces()) == 1


def test_settle_heap_freezes_what_is_loaded() -> None:
    import gc

    from rollhub_gateway.http.serving import settle_heap

    try:
        settle_heap()
        assert gc.get_freeze_count() > 1000
    finally:
        gc.unfreeze()


def test_unique_ids_are_unique_per_process_and_after_a_fork() -> None:
    import multiprocessing
    import re

    from rollhub_gateway.unique_ids import unique_id

    ids = [unique_id("call_") for _ in range(10_000)]
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"call_[0-9a-f]{24}", i) for i in ids[:50])
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        child = pool.apply(unique_id, ("call_",))
    # a forked child draws its own prefix: it never repeats the parent's next ids
    assert child[5:17] != ids[0][5:17]
    assert child not in {unique_id("call_") for _ in range(100)}
