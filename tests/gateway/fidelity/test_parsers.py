"""Output parsing per family: whole outputs, streams, ill-formed markup."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rollhub_gateway.conformance.report import CONFORMANCE_FAMILIES
from rollhub_gateway.token_codec import BatchDecoder

TOOL_FAMILIES = [n for n, (fam, _) in CONFORMANCE_FAMILIES.items() if fam != "chatml"]


def _ids(model, text: str, stop: str | None = None) -> list[int]:
    r = model.renderer
    ids = r.encode(text)
    stop_id = r.tokenizer.convert_tokens_to_ids(stop) if stop else r.stop_ids[0]
    return [*ids, stop_id]


def _stream(model, ids, prepared=None):
    parser = model.new_parser(prepared)
    deltas = []
    for t in ids:
        deltas += parser.feed([t])
    return deltas, parser.finish()


def _stop_for(fam: str, calls: bool) -> str | None:
    if fam == "gpt_oss":
        return "<|call|>" if calls else "<|return|>"
    if fam == "glm4_moe":
        return "<|observation|>" if calls else "<|user|>"
    if fam == "gemma4":
        return "<|tool_response>" if calls else "<turn|>"
    return None


@pytest.mark.parametrize("name", TOOL_FAMILIES)
def test_tool_call_round_trip_and_stream(name, family_model):
    model = family_model(name)
    fam = model.renderer.family
    opens = model.renderer.prompt_opens_reasoning
    args = {"city": "Paris", "days": 3, "units": {"temp": "C"}}
    text = fam.format_output(
        "Let me check." if fam.content_with_calls else "",
        reasoning="weather needed" if fam.has_reasoning else None,
        tool_calls=[("get_weather", args)],
        in_reasoning=opens,
    )
    deltas, parsed = _stream(model, _ids(model, text, _stop_for(fam.name, True)))
    assert not parsed.ill_formed
    assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == [("get_weather", args)]
    content = "".join(d.text for d in deltas if d.kind == "content")
    assert parsed.content.startswith(content)
    assert "<" not in content  # no markup, not even a partial marker, was streamed
    if fam.has_reasoning:
        assert parsed.reasoning == "weather needed"
        assert "".join(d.text for d in deltas if d.kind == "reasoning") == "weather needed"


@pytest.mark.parametrize(
    "name", ["qwen2_5", "qwen3", "qwen3_6", "glm4_moe", "deepseek_v3", "gemma4", "lfm2", "lfm2_2_5"]
)
def test_malformed_tool_call_is_text_and_flagged(name, family_model):
    model = family_model(name)
    fam = model.renderer.family
    good = fam.format_output(
        "", tool_calls=[("f", {"a": 1})], in_reasoning=model.renderer.prompt_opens_reasoning
    )
    # cut the markup short inside the arguments: unparseable
    bad = good[: good.rindex("1") + 1]
    deltas, parsed = _stream(model, _ids(model, bad, _stop_for(fam.name, True)))
    assert parsed.ill_formed and parsed.tool_calls == []
    assert parsed.content.endswith(bad.split(fam.tool_markers[0])[-1])
    streamed = "".join(d.text for d in deltas if d.kind == "content")
    assert parsed.content.startswith(streamed)


def test_hermes_holds_back_a_partial_marker(family_model):
    model = family_model("qwen2_5")
    r = model.renderer
    parser = model.new_parser()
    out = parser.feed(r.encode("Sure <tool"))
    assert "".join(d.text for d in out) == "Sure"
    out = parser.feed(r.encode("box> is not a tag"))
    assert "".join(d.text for d in out) == " <toolbox> is not a tag"
    assert parser.finish().content == "Sure <toolbox> is not a tag"


def test_llama_json_answer_is_content_not_a_call(family_model):
    model = family_model("llama3_1")
    text = '{"answer": 42}'
    _, parsed = _stream(model, _ids(model, text))
    assert parsed.content == text and not parsed.tool_calls and not parsed.ill_formed
    _, parsed = _stream(
        model, _ids(model, '<|python_tag|>{"name": "f", "parameters": {"x": 1}}', "<|eom_id|>")
    )
    assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == [("f", {"x": 1})]


def test_deepseek_output_after_tool_results_has_no_reasoning(family_model):
    from rollhub_gateway.turns import ChatTurn

    model = family_model("deepseek_r1")
    conv = model.new_conversation("ds")
    messages = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
    ]
    prep = conv.prepare(
        ChatTurn(
            messages,
            tools=[
                {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
            ],
        )
    )
    assert not prep.state.opens_reasoning  # the template adds no <think> after tool outputs
    deltas, parsed = _stream(model, _ids(model, "The result is r."), prep)
    assert parsed.content == "The result is r." and parsed.reasoning is None
    assert [d.kind for d in deltas] == ["content"] * len(deltas)


def test_gpt_oss_final_channel_and_analysis(family_model):
    model = family_model("gpt_oss")
    text = (
        "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final<|message|>Hi!"
    )
    deltas, parsed = _stream(model, _ids(model, text, "<|return|>"))
    assert (parsed.reasoning, parsed.content, parsed.tool_calls) == ("think", "Hi!", [])
    assert "".join(d.text for d in deltas if d.kind == "content") == "Hi!"


def test_incremental_decoder_holds_split_utf8(family_model):
    model = family_model("qwen2_5")
    r = model.renderer
    ids = r.encode("héllo 你好 🙂")
    parser = model.new_parser()
    text = "".join(d.text for t in ids for d in parser.feed([t]))
    assert "\ufffd" not in text
    assert parser.finish().content == "héllo 你好 🙂"
    assert "héllo 你好 🙂".startswith(text)


def test_gpt_oss_two_analysis_messages_stream_like_the_parse(family_model):
    model = family_model("gpt_oss")
    text = (
        "<|channel|>analysis<|message|>first<|end|>"
        "<|start|>assistant<|channel|>analysis<|message|>second<|end|>"
        "<|start|>assistant<|channel|>final<|message|>done"
    )
    deltas, parsed = _stream(model, _ids(model, text, "<|return|>"))
    assert parsed.reasoning == "first\nsecond" and parsed.content == "done"
    assert "".join(d.text for d in deltas if d.kind == "reasoning") == parsed.reasoning


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(TOOL_FAMILIES),
    content=st.sampled_from(["", "Sure, one moment.", "a < b and c > d", "ünïcödé 🙂 text"]),
    calls=st.integers(0, 2),
    reasoning=st.booleans(),
    cuts=st.lists(st.integers(1, 7), max_size=40),
)
def test_any_chunking_streams_a_prefix_of_the_parse(
    name, content, calls, reasoning, cuts, family_model
):
    model = family_model(name)
    fam = model.renderer.family
    n_calls = min(calls, 1) if not fam.content_with_calls else calls
    tool_calls = [("get_weather", {"city": f"c{i}", "n": i}) for i in range(n_calls)]
    has_reasoning = fam.has_reasoning
    text = fam.format_output(
        "" if tool_calls and not fam.content_with_calls else content,
        reasoning="step one\nstep two" if reasoning and has_reasoning else None,
        tool_calls=tool_calls,
        in_reasoning=model.renderer.prompt_opens_reasoning,
    )
    ids = _ids(model, text, _stop_for(fam.name, bool(tool_calls)))
    parser = model.new_parser()
    deltas, pos = [], 0
    for cut in [*cuts, len(ids)]:
        deltas += parser.feed(ids[pos : pos + cut])
        pos += cut
    deltas += parser.feed(ids[pos:])
    parsed = parser.finish()
    assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == tool_calls
    streamed = "".join(d.text for d in deltas if d.kind == "content")
    assert parsed.content.startswith(streamed)
    if parsed.reasoning is not None:
        assert "".join(d.text for d in deltas if d.kind == "reasoning") == parsed.reasoning


def test_a_family_without_reasoning_markup_streams_content_even_if_told_it_reasons(
    family_model,
):
    """``in_reasoning`` means nothing to a family with no reasoning markup (``parse``
    ignores it); the streaming parser agrees instead of looking up markup it has not."""
    model = family_model("smollm2")
    r = model.renderer
    parser = r.family.new_stream_parser(BatchDecoder(r.codec, set(r.stop_ids)),
                                        in_reasoning=True)
    text = "The answer is 4."
    deltas = [d for t in r.encode(text) for d in parser.feed([t])]
    assert [d.kind for d in deltas] == ["content"] * len(deltas)
    assert "".join(d.text for d in deltas) == text
    assert (parser.finish().content, r.family.parse(text, in_reasoning=True).reasoning) == (
        text, None)
