"""Muse Glimmer (ATEM): addressed messages, the template's own call markup, streams."""

from __future__ import annotations

import json

import pytest
from rollhub.sampling import Generation
from rollhub_gateway.conformance.script import TOOLS
from rollhub_gateway.engines.scripted import scripted_logprob
from rollhub_gateway.families.atem import format_invoke
from rollhub_gateway.turns import ChatTurn

CALL = (
    " to=self<|message|>Need weather.<|eom|><|start|>assistant to=get_weather<|message|>"
    '<atem:function_calls>\n<atem:invoke name="get_weather">\n'
    '<atem:parameter name="city">Paris</atem:parameter>\n'
    '<atem:parameter name="days">3</atem:parameter>\n'
    '<atem:parameter name="opts">{"metric": true}</atem:parameter>\n'
    "</atem:invoke>\n</atem:function_calls><|eom|><|start|>assistant to=get_time<|message|>"
    '<atem:function_calls>\n<atem:invoke name="get_time">\n'
    '<atem:parameter name="tz">UTC</atem:parameter>\n</atem:invoke>\n</atem:function_calls>'
)


def _ids(model, text):
    r = model.renderer
    return [*r.encode(text), r.tokenizer.convert_tokens_to_ids("<|eot|>")]


def test_reasoning_and_parallel_calls_parse(family_model):
    model = family_model("muse_glimmer")
    parsed = model.parse(_ids(model, CALL))
    assert parsed.reasoning == "Need weather." and parsed.content == ""
    assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == [
        ("get_weather", {"city": "Paris", "days": 3, "opts": {"metric": True}}),
        ("get_time", {"tz": "UTC"}),
    ]


@pytest.mark.parametrize(
    "bad",
    [
        ' to=get_weather<|message|><atem:function_calls>\n<atem:invoke name="get_weather">',
        " to=get_weather<|message|>just text",
        ' to=get_weather<|message|><atem:function_calls>stray<atem:invoke name="f">'
        "</atem:invoke></atem:function_calls>",
        " to=user no message marker",
    ],
)
def test_ill_formed_messages_are_text_and_flagged(bad, family_model):
    model = family_model("muse_glimmer")
    parsed = model.parse(_ids(model, bad))
    assert parsed.ill_formed and parsed.tool_calls == [] and parsed.content == bad


def test_calls_are_written_the_way_the_template_writes_them(family_model):
    model = family_model("muse_glimmer")
    r = model.renderer
    args = {"city": "Paris", "days": 3, "metric": False, "note": None, "tags": ["a"]}
    msg = r.family.to_template_message(
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "get_weather", "arguments": json.dumps(args)}}]}
    )  # fmt: skip
    text = r.render_text([{"role": "user", "content": "hi"}, msg], TOOLS, generation=False)
    assert text.endswith(
        "<|start|>assistant to=get_weather<|message|>" + format_invoke("get_weather", args)
        + "<|eot|>"
    )  # fmt: skip


@pytest.mark.parametrize("chunk", [1, 2, 5])
def test_stream_shows_reasoning_and_answer_never_markup(chunk, family_model):
    model = family_model("muse_glimmer")
    fam = model.renderer.family
    text = fam.format_output("It is sunny.", reasoning="Look.\nThen answer.")
    ids = _ids(model, text)
    parser = model.new_parser()
    deltas = []
    for i in range(0, len(ids), chunk):
        deltas += parser.feed(ids[i : i + chunk])
    parsed = parser.finish()
    assert (parsed.reasoning, parsed.content) == ("Look.\nThen answer.", "It is sunny.")
    assert "".join(d.text for d in deltas if d.kind == "reasoning") == parsed.reasoning
    assert "".join(d.text for d in deltas if d.kind == "content") == parsed.content
    calls = _ids(model, CALL)
    parser = model.new_parser()
    shown = [d for i in range(0, len(calls), chunk) for d in parser.feed(calls[i : i + chunk])]
    assert "".join(d.text for d in shown if d.kind == "content") == ""
    assert len(parser.finish().tool_calls) == 2


def test_tool_loop_appends_id_exactly(family_model):
    """The template renders reasoning and calls the way the model wrote them: the next
    prompt extends the sampled ids and equals a fresh render of the history."""
    model = family_model("muse_glimmer")
    r = model.renderer
    conv = model.new_conversation("atem")
    msgs = [{"role": "user", "content": "Weather in Paris?"}]
    p1 = conv.prepare(ChatTurn(list(msgs), tools=TOOLS))
    out1 = _ids(model, CALL)
    parsed = model.parse(out1, p1)
    conv.commit(
        p1, Generation(out1, [scripted_logprob(i, t) for i, t in enumerate(out1)], "stop"), parsed
    )
    asst = r.family.assistant_message(parsed)
    msgs.append(asst)
    msgs += [{"role": "tool", "tool_call_id": c.id, "content": "ok"} for c in parsed.tool_calls]
    p2 = conv.prepare(ChatTurn(list(msgs), tools=TOOLS))
    assert p2.drift == "append"
    assert p2.prompt_ids[: len(p1.prompt_ids) + len(out1)] == p1.prompt_ids + out1
    fresh = r.encode(r.render_text(r.template_messages(msgs), TOOLS, generation=True))
    assert fresh == p2.prompt_ids
