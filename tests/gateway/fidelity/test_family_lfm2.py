"""LFM2 / LFM2.5: Python-style call lists, the templates' own call markup, and the first
LFM2 template, whose calls live in the assistant's text (real templates, id-exact)."""

from __future__ import annotations

import json

import openai
import pytest
from rollhub.sampling import Generation
from rollhub_gateway.conformance.script import TOOLS
from rollhub_gateway.engines.scripted import ScriptedBackend, scripted_logprob
from rollhub_gateway.families.pythonic import format_calls, parse_calls
from rollhub_gateway.gateway import Gateway
from rollhub_gateway.http.serving import ThreadedGateway
from rollhub_gateway.turns import ChatTurn

OPEN, CLOSE = "<|tool_call_start|>", "<|tool_call_end|>"


def _calls(section):
    return [(c.name, json.loads(c.arguments)) for c in parse_calls(section)]


def _gen(ids):
    return Generation(ids, [scripted_logprob(i, t) for i, t in enumerate(ids)], "stop")


def test_python_call_lists_parse():
    section = (
        OPEN + "[get_weather(city='Paris', days=3, ratio=-0.5, metric=True, note=None), "
        'search(q=\'it\\\'s "quoted"\\n\', opts={"deep": true, "k": null, "ids": [1, 2]}),'
        " tools.ping()]" + CLOSE
    )
    assert _calls(section) == [
        ("get_weather", {"city": "Paris", "days": 3, "ratio": -0.5, "metric": True, "note": None}),
        ("search", {"q": 'it\'s "quoted"\n', "opts": {"deep": True, "k": None, "ids": [1, 2]}}),
        ("tools.ping", {}),
    ]


def test_json_call_lists_parse():
    # the models' JSON mode ("Output function calls as JSON" in the system prompt)
    section = (
        OPEN + '[{"name": "get_weather", "arguments": {"city": "Paris", "metric": true}}, '
        '{"name": "ping", "arguments": {}}]' + CLOSE
    )
    assert _calls(section) == [("get_weather", {"city": "Paris", "metric": True}), ("ping", {})]
    assert parse_calls(OPEN + '[{"arguments": {}}]' + CLOSE) is None


@pytest.mark.parametrize(
    "bad",
    [
        OPEN + "[f(1)]" + CLOSE,  # positional: no parameter name
        OPEN + "[f(a=1)" + CLOSE,  # unclosed list
        OPEN + "[f(a=1)]",  # no end marker
        OPEN + "[f(a=1)]" + CLOSE + " and more",
        OPEN + "[f(a=g())]" + CLOSE,  # not a literal
        OPEN + "[f(**kw)]" + CLOSE,
        OPEN + "[1 + 2]" + CLOSE,
    ],
)
def test_ill_formed_call_lists_are_refused(bad):
    # either answer makes the family return the text as content, flagged ill-formed
    try:
        assert parse_calls(bad) is None
    except ValueError:
        pass


def test_round_trip_of_format_calls():
    calls = [
        ("a", {"s": "x'y\\z\nw", "n": 2, "b": False, "l": [1, "2"], "m": {"k": None}}),
        ("b", {}),
    ]
    assert _calls(format_calls(calls)) == calls


@pytest.mark.parametrize("name", ["lfm2_v2", "lfm2_2_5", "lfm2_2_5_v2", "lfm2_2_5_vl"])
def test_calls_are_written_the_way_the_template_writes_them(name, family_model):
    model = family_model(name)
    r = model.renderer
    fam = r.family
    calls = [("get_weather", {"city": "Paris", "days": 3}), ("get_time", {"tz": "UTC"})]
    msg = fam.to_template_message(
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": f"c{i}", "type": "function",
             "function": {"name": n, "arguments": json.dumps(a)}}
            for i, (n, a) in enumerate(calls)]}
    )  # fmt: skip
    text = r.render_text([{"role": "user", "content": "hi"}, msg], TOOLS, generation=False)
    assert fam.format_output("Checking.", tool_calls=calls) + "<|im_end|>" in text


def test_malformed_call_is_text_and_flagged(family_model):
    model = family_model("lfm2_2_5")
    r = model.renderer
    text = "Let me see." + OPEN + "[get_weather(city='Paris'" + CLOSE
    parsed = model.parse([*r.encode(text), r.stop_ids[0]])
    assert parsed.ill_formed and parsed.tool_calls == [] and parsed.content == text


def test_first_lfm2_template_keeps_calls_in_the_text(family_model):
    """The first LFM2 template never reads ``tool_calls``: the model's calls go back into
    the assistant's text, so the next prompt extends the sampled ids and a fresh render of
    the agent's history is the same ids."""
    model = family_model("lfm2")
    assert model.family == "lfm2_inline" and model.supports_tools()
    r = model.renderer
    conv = model.new_conversation("lfm2")
    msgs = [{"role": "user", "content": "Weather in Paris?"}]
    p1 = conv.prepare(ChatTurn(list(msgs), tools=TOOLS))
    text = r.family.format_output("Checking.", tool_calls=[("get_weather", {"city": "Paris"})])
    out1 = [*r.encode(text), r.stop_ids[0]]
    parsed = model.parse(out1, p1)
    assert parsed.content == "Checking." and parsed.tool_calls[0].name == "get_weather"
    conv.commit(p1, _gen(out1), parsed)
    c = parsed.tool_calls[0]
    msgs += [
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": c.id, "type": "function",
             "function": {"name": c.name, "arguments": c.arguments}}]},
        {"role": "tool", "tool_call_id": c.id, "content": "sunny"},
    ]  # fmt: skip
    p2 = conv.prepare(ChatTurn(list(msgs), tools=TOOLS))
    assert p2.drift == "append"
    assert p2.prompt_ids[: len(p1.prompt_ids) + len(out1)] == p1.prompt_ids + out1
    fresh = r.encode(r.render_text(r.template_messages(msgs), TOOLS, generation=True))
    assert fresh == p2.prompt_ids
    assert r.tokenizer.decode(p2.prompt_ids[len(p1.prompt_ids) + len(out1) :]) == (
        "\n<|im_start|>tool\n<|tool_response_start|>sunny<|tool_response_end|><|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_openai_streamed_tool_calls(family_model):
    """Through the real gateway and the openai SDK, streamed: text first, then the
    parallel calls; nothing of the markup leaks into the text."""
    model = family_model("lfm2_2_5")
    r = model.renderer
    backend = ScriptedBackend()
    calls = [("get_weather", {"city": "Paris"}), ("get_time", {"tz": "UTC"})]
    text = r.family.format_output("One moment.", reasoning="Two tools.", tool_calls=calls)
    backend.add([*r.encode(text), r.stop_ids[0]])
    with ThreadedGateway(Gateway(backend, model)) as gw:
        s = gw.open_session("lfm2-stream")
        client = openai.OpenAI(base_url=gw.base_url, api_key=s.key, max_retries=0)
        chunks = list(
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], tools=TOOLS, stream=True
            )
        )
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert "".join(d.content or "" for d in deltas) == "One moment."
    got: dict[int, list[str]] = {}
    for d in deltas:
        for tc in d.tool_calls or []:
            got.setdefault(tc.index, ["", ""])
            got[tc.index][0] += tc.function.name or ""
            got[tc.index][1] += tc.function.arguments or ""
    assert [(n, json.loads(a)) for n, a in got.values()] == calls
    assert chunks[-1].choices == [] or chunks[-1].choices[0].finish_reason in (
        "tool_calls",
        None,
    )


def test_template_alone_sees_the_calls_as_text(family_model):
    """The conformance oracle hands the first LFM2 template the calls the way its users
    write them, inside the text: its own rendering then matches the gateway's prompt."""
    from rollhub_gateway.chat_templates.oracle import (
        direct_message,
        direct_render,
        template_rewrites,
    )
    from rollhub_gateway.turns import ParsedOutput, ToolCall

    model = family_model("lfm2")
    r = model.renderer
    parsed = ParsedOutput(
        "Checking.", tool_calls=[ToolCall("c1", "get_weather", '{"city": "Paris"}')]
    )
    user = {"role": "user", "content": "Weather in Paris?"}
    direct = [user, direct_message(r.family, parsed)]
    assert direct[1]["content"] == OPEN + "[get_weather(city='Paris')]" + CLOSE + "Checking."
    direct.append({"role": "tool", "tool_call_id": "c1", "content": "sunny"})
    agent = [user, model.renderer.family.assistant_message(parsed), direct[2]]
    want = r.render_text(r.template_messages(agent), TOOLS, generation=True)
    assert direct_render(r, direct, TOOLS, True) == want
    assert not template_rewrites(r, direct, 1, TOOLS)


@pytest.mark.parametrize("name", ["lfm2", "lfm2_v2", "lfm2_2_5"])
def test_text_after_the_call_block_is_content(name, family_model):
    """LFM2's model card: the call block first, then the text (double-quoted strings)."""
    model = family_model(name)
    r = model.renderer
    text = (
        OPEN + '[get_candidate_status(candidate_id="12345")]' + CLOSE
        + "Checking the current status of candidate ID 12345."
    )  # fmt: skip
    ids = [*r.encode(text), r.stop_ids[0]]
    parser = model.new_parser()
    streamed = "".join(d.text for t in ids for d in parser.feed([t]) if d.kind == "content")
    parsed = parser.finish()
    assert parsed.content == "Checking the current status of candidate ID 12345."
    assert parsed.content.startswith(streamed) and not parsed.ill_formed
    assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == [
        ("get_candidate_status", {"candidate_id": "12345"})
    ]
    both = model.parse([*r.encode("A." + text + " B."), r.stop_ids[0]])
    assert both.content == "A. Checking the current status of candidate ID 12345. B."
    twice = model.parse([*r.encode(text + OPEN + "[f()]" + CLOSE), r.stop_ids[0]])
    assert twice.ill_formed and twice.tool_calls == []
