"""Gemma 4: the argument notation, the template's own call markup, and a tool loop whose
results continue the same model turn (real templates, id-exact continuity)."""

from __future__ import annotations

import json

import anthropic
import pytest
from rollhub.errors import GatewayError
from rollhub.sampling import Generation
from rollhub_gateway.conformance.script import TOOLS
from rollhub_gateway.engines.scripted import ScriptedBackend, scripted_logprob
from rollhub_gateway.families.gemma4 import format_value, parse_arguments
from rollhub_gateway.gateway import Gateway
from rollhub_gateway.http.serving import ThreadedGateway
from rollhub_gateway.turns import ChatTurn

Q = '<|"|>'
ARGS = {
    "city": "Paris, FR",
    "days": 3,
    "ratio": -0.5,
    "metric": True,
    "note": None,
    "tags": ["a", "b c"],
    "where": {"lat": 48.8, "label": "centre {1}"},
}


def _gen(ids):
    return Generation(ids, [scripted_logprob(i, t) for i, t in enumerate(ids)], "stop")


def test_argument_notation_round_trips():
    text = format_value(ARGS)
    assert text.startswith("{city:" + Q + "Paris, FR" + Q + ",days:3,metric:true,note:null")
    assert parse_arguments(text) == ARGS
    # keys the template escapes (tool declarations, nested in some revisions) read too
    assert parse_arguments("{" + Q + "k" + Q + ":[1,{x:false}]}") == {"k": [1, {"x": False}]}
    assert parse_arguments("{ a : 1 , b : " + Q + "}" + Q + " }") == {"a": 1, "b": "}"}


@pytest.mark.parametrize(
    "bad",
    ["{a:1", "{a:" + Q + "open}", "{a:1}x", "{a 1}", "{a:word}", "[1]", "{a:1,}", "{:1}"],
)
def test_ill_formed_arguments_raise(bad):
    with pytest.raises(ValueError):
        parse_arguments(bad)


@pytest.mark.parametrize("name", ["gemma4", "gemma4_v2", "gemma4_v5", "diffusion_gemma"])
def test_calls_are_written_the_way_the_template_writes_them(name, family_model):
    model = family_model(name)
    r = model.renderer
    fam = r.family
    args = {"city": "Paris", "days": 3, "metric": False, "tags": ["x", "y"]}
    call = fam.to_template_message(
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "get_weather", "arguments": json.dumps(args)}}]}
    )  # fmt: skip
    text = r.render_text([{"role": "user", "content": "hi"}, call], TOOLS, generation=False)
    assert fam.format_call("get_weather", args, 0) in text


def test_malformed_call_is_text_and_flagged(family_model):
    model = family_model("gemma4")
    r = model.renderer
    text = '<|tool_call>call:get_weather{city:<|"|>Paris<tool_call|>'
    ids = [*r.encode(text), r.tokenizer.convert_tokens_to_ids("<|tool_response>")]
    parsed = model.parse(ids)
    assert parsed.ill_formed and parsed.tool_calls == [] and parsed.content == text


def test_tool_results_continue_the_model_turn_id_exactly(family_model):
    """The call turn stops on ``<|tool_response>``; the template writes the results right
    after it and no new ``<|turn>model`` header: the next prompt is the previous prompt,
    the sampled ids, then only the results."""
    model = family_model("gemma4")
    r = model.renderer
    fam = r.family
    conv = model.new_conversation("g4")
    msgs = [{"role": "user", "content": "Weather in Paris and Rome?"}]
    p1 = conv.prepare(ChatTurn(list(msgs), tools=TOOLS))
    calls = [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"})]
    text = fam.format_output("", reasoning="Two cities.", tool_calls=calls)
    out1 = [*r.encode(text), r.tokenizer.convert_tokens_to_ids("<|tool_response>")]
    parsed = model.parse(out1, p1)
    assert parsed.reasoning == "Two cities."
    assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == calls
    conv.commit(p1, _gen(out1), parsed)
    msgs.append({"role": "assistant", "content": None, "tool_calls": [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        for c in parsed.tool_calls]})  # fmt: skip
    msgs += [
        {"role": "tool", "tool_call_id": c.id, "content": f"sunny in {args['city']}"}
        for c, (_, args) in zip(parsed.tool_calls, calls, strict=True)
    ]
    p2 = conv.prepare(ChatTurn(list(msgs), tools=TOOLS))
    assert p2.drift == "append"
    head = p1.prompt_ids + out1
    assert p2.prompt_ids[: len(head)] == head
    tail = r.tokenizer.decode(p2.prompt_ids[len(head) :])
    assert tail == (
        "response:get_weather{value:" + Q + "sunny in Paris" + Q + "}<tool_response|>"
        "<|tool_response>response:get_weather{value:" + Q + "sunny in Rome" + Q + "}"
        "<tool_response|>"
    )
    out2 = [*r.encode("Sunny in both."), r.tokenizer.convert_tokens_to_ids("<turn|>")]
    parsed2 = model.parse(out2, p2)
    assert parsed2.content == "Sunny in both." and not parsed2.tool_calls
    conv.commit(p2, _gen(out2), parsed2)
    [record] = conv.traces()
    assert record.num_sampled == len(out1) + len(out2)
    assert record.full_ids == p2.prompt_ids + out2


def test_anthropic_tool_use_round_trip(family_model):
    """Through the real gateway and the anthropic SDK: tool_use blocks out, tool_result
    blocks back in, one append-only record."""
    model = family_model("gemma4_v5")
    r = model.renderer
    fam = r.family
    stop = r.tokenizer.convert_tokens_to_ids
    backend = ScriptedBackend()
    call = fam.format_output("", tool_calls=[("get_weather", {"city": "Paris"})])
    backend.add([*r.encode(call), stop("<|tool_response>")], [*r.encode("Sunny."), stop("<turn|>")])
    tools = [
        {"name": t["function"]["name"], "description": t["function"]["description"],
         "input_schema": t["function"]["parameters"]}
        for t in TOOLS
    ]  # fmt: skip
    user = [{"role": "user", "content": "Weather in Paris?"}]
    with ThreadedGateway(Gateway(backend, model)) as gw:
        s = gw.open_session("g4-anthropic")
        client = anthropic.Anthropic(base_url=gw.url, api_key=s.key, max_retries=0)
        m = client.messages.create(model="m", max_tokens=64, messages=user, tools=tools)
        assert m.stop_reason == "tool_use"
        [use] = [b for b in m.content if b.type == "tool_use"]
        assert (use.name, use.input) == ("get_weather", {"city": "Paris"})
        history = [
            *user,
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}]},
        ]  # fmt: skip
        m2 = client.messages.create(model="m", max_tokens=64, messages=history, tools=tools)
        assert m2.content[0].text == "Sunny." and m2.stop_reason == "end_turn"
        records = gw.finish_session(s.session_id)
    assert [span.drift for rec in records for span in rec.turns] == ["append", "append"]
    assert backend.prompts[1][: len(backend.prompts[0])] == backend.prompts[0]


def test_gemma3_still_refuses_tools(family_model):
    """Gemma 3's template has no tool syntax: tools are refused before sampling."""
    from rollhub_gateway.chat_model import build_chat_model
    from rollhub_gateway.testing_tokenizers import trl_template

    base = family_model("gemma4").renderer.tokenizer
    model = build_chat_model("g3", tokenizer=base, chat_template=trl_template("gemma3.jinja"))
    conv = model.new_conversation("g3")
    with pytest.raises(GatewayError, match="cannot render tools"):
        conv.prepare(ChatTurn([{"role": "user", "content": "hi"}], tools=TOOLS))


def test_thinking_after_tool_results_opens_in_the_prompt(family_model):
    """With ``enable_thinking`` the latest Gemma 4 template opens the thought channel right
    after the tool results: the parser starts inside it."""
    from rollhub_gateway.chat_model import build_chat_model
    from rollhub_gateway.conformance.templates import template_for, tokenizer_for

    model = build_chat_model(
        "g4t",
        tokenizer=tokenizer_for("gemma4_v5"),
        chat_template=template_for("gemma4_v5"),
        template_kwargs={"enable_thinking": True},
    )
    r = model.renderer
    conv = model.new_conversation("g4t")
    msgs = [{"role": "user", "content": "Weather in Paris?"}]
    p1 = conv.prepare(ChatTurn(list(msgs), tools=TOOLS))
    assert r.tokenizer.decode(p1.prompt_ids).startswith("<bos><|turn>system\n<|think|>")
    text = r.family.format_output(
        "", reasoning="Look it up.", tool_calls=[("get_weather", {"city": "Paris"})]
    )
    out1 = [*r.encode(text), r.tokenizer.convert_tokens_to_ids("<|tool_response>")]
    parsed = model.parse(out1, p1)
    conv.commit(p1, _gen(out1), parsed)
    c = parsed.tool_calls[0]
    msgs += [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}]},
        {"role": "tool", "tool_call_id": c.id, "content": "sunny"},
    ]  # fmt: skip
    p2 = conv.prepare(ChatTurn(list(msgs), tools=TOOLS))
    assert p2.drift == "append" and p2.state.opens_reasoning
    assert r.tokenizer.decode(p2.prompt_ids).endswith("<tool_response|><|channel>thought\n")
    out2 = [
        *r.encode("It is sunny.\n<channel|>Sunny."),
        r.tokenizer.convert_tokens_to_ids("<turn|>"),
    ]
    deltas, parser = [], model.new_parser(p2)
    for t in out2:
        deltas += parser.feed([t])
    parsed2 = parser.finish()
    assert (parsed2.reasoning, parsed2.content) == ("It is sunny.", "Sunny.")
    assert "".join(d.text for d in deltas if d.kind == "reasoning") == "It is sunny."
