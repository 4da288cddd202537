"""Stop sequences: the returned text ends before the stop string (OpenAI, Anthropic), the
Anthropic reply names it, and the trace keeps every sampled id, the stop string's included."""

from __future__ import annotations

import anthropic
import openai
import pytest

USER = [{"role": "user", "content": "What is 2 + 2? Answer, then write END."}]
TEXT = "The answer is 4. "


@pytest.fixture
def stopped(ids):
    """The engine's output with the stop string kept (vLLM include_stop_str_in_output)."""
    return ids(TEXT + "END", end=False)


@pytest.mark.parametrize("stream", [False, True])
async def test_openai_text_ends_before_the_stop_string(gateway, scripted, stopped, helpers, stream):
    s = gateway.open_session("s1")
    scripted.add(stopped)
    client = openai.AsyncOpenAI(base_url=gateway.base_url, api_key=s.key)
    kw = {"model": "m", "messages": USER, "stop": ["STOP", "END"]}
    if stream:
        chunks = [c async for c in await client.chat.completions.create(**kw, stream=True)]
        deltas = [c.choices[0].delta.content or "" for c in chunks if c.choices]
        assert not any("E" in d for d in deltas)  # no part of the stop string was ever sent
        text, finish = "".join(deltas), chunks[-1].choices[0].finish_reason
    else:
        r = await client.chat.completions.create(**kw)
        text, finish = r.choices[0].message.content, r.choices[0].finish_reason
    assert text == TEXT and finish == "stop"
    helpers.assert_recorded(gateway.traces("s1"), 0, stopped)  # every sampled id, END's too


@pytest.mark.parametrize("stream", [False, True])
async def test_anthropic_names_the_stop_sequence(gateway, scripted, stopped, helpers, stream):
    s = gateway.open_session("s1")
    scripted.add(stopped)
    client = anthropic.AsyncAnthropic(base_url=gateway.url, api_key=s.key)
    kw = {"model": "m", "max_tokens": 64, "messages": USER, "stop_sequences": ["END"]}
    if stream:
        async with client.messages.stream(**kw) as st:
            msg = await st.get_final_message()
    else:
        msg = await client.messages.create(**kw)
    assert msg.stop_reason == "stop_sequence" and msg.stop_sequence == "END"
    assert [b.text for b in msg.content] == [TEXT]
    helpers.assert_recorded(gateway.traces("s1"), 0, stopped)


async def test_without_a_stop_match_nothing_is_cut(gateway, scripted, ids):
    s = gateway.open_session("s1")
    scripted.add(ids("Four."))
    client = anthropic.AsyncAnthropic(base_url=gateway.url, api_key=s.key)
    msg = await client.messages.create(
        model="m", max_tokens=64, messages=USER, stop_sequences=["END"]
    )
    assert msg.stop_reason == "end_turn" and msg.stop_sequence is None
    assert msg.content[0].text == "Four."


async def test_the_next_turn_continues_after_the_sampled_stop_ids(
    gateway, scripted, stopped, ids, helpers
):
    """The agent sends back the cut text; the next prompt continues after the sampled ids,
    the stop string's included (the model's context is what it sampled): an append."""
    s = gateway.open_session("s1")
    scripted.add(stopped, ids("Yes."))
    client = openai.AsyncOpenAI(base_url=gateway.base_url, api_key=s.key)
    r = await client.chat.completions.create(model="m", messages=USER, stop=["END"])
    history = [*USER, {"role": "assistant", "content": r.choices[0].message.content}]
    await client.chat.completions.create(
        model="m", messages=[*history, {"role": "user", "content": "Sure?"}]
    )
    first = scripted.prompts[0] + stopped
    assert scripted.prompts[1][: len(first)] == first
    (rec,) = gateway.traces("s1")
    assert [t.drift for t in rec.turns] == ["append", "append"]
    helpers.assert_recorded([rec], 0, stopped)
    helpers.assert_recorded([rec], 1, ids("Yes."))
