"""The conformance run: every family, real templates, scripted multi-turn tool sessions."""

from __future__ import annotations

import pytest
from rollhub_gateway.conformance import main, run_family, run_family_http
from rollhub_gateway.conformance.report import APPEND_ONLY, CONFORMANCE_FAMILIES
from rollhub_gateway.conformance.script import TOOLS


@pytest.mark.parametrize("name", sorted(CONFORMANCE_FAMILIES))
def test_family_session_keeps_every_sampled_token(name, family_model):
    report = run_family(name, family_model(name))
    assert report.ok, report.failures
    assert report.sampled > 0 and report.in_records == report.sampled
    if name in APPEND_ONLY:
        assert report.counts["rerender"] == report.counts["fork"] == 0
        assert report.counts["append"] == report.turns


@pytest.mark.parametrize("name", sorted(CONFORMANCE_FAMILIES))
def test_family_session_through_the_http_api(name, family_model):
    # the real gateway on 127.0.0.1, driven by the openai SDK
    model = family_model(name)
    http = run_family_http(name, model)
    assert http.ok, http.failures
    assert http.counts == run_family(name, model).counts


@pytest.mark.parametrize(
    "name", ["qwen3", "glm4_moe", "gpt_oss", "gemma4", "lfm2_2_5", "nemotron_3_nano"]
)
def test_reasoning_templates_rerender_only_after_a_new_user_message(name, family_model):
    # these templates drop earlier reasoning once a new user query arrives; tool loops
    # in between must stay append-only (the DeepSeek templates also drop the reasoning of
    # a tool-call turn inside tool loops)
    report = run_family(name, family_model(name))
    assert report.counts["rerender"] == 2 and report.counts["fork"] == 0
    assert report.counts["masked_tokens"] > 0


def test_main_prints_the_table(capsys):
    assert main(["--family", "qwen2_5", "--markdown"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("| family | via | parser | turns |")
    assert "| qwen2_5 | direct | hermes | 6 | 6 | 0 | 0 | 0 |" in out
    assert "| qwen2_5 | http | hermes | 6 | 6 | 0 | 0 | 0 |" in out


def test_deepseek_r1_keeps_the_models_tool_calls_in_history(family_model):
    """R1's template renders an assistant's tool calls only when its content is none: the
    agent's ``content: None`` must reach it, or the next prompt shows tool outputs for
    calls the model never made."""
    from rollhub.sampling import Generation
    from rollhub_gateway.turns import ChatTurn

    model = family_model("deepseek_r1")
    r = model.renderer
    conv = model.new_conversation("r1")
    msgs = [{"role": "user", "content": "Weather in Paris?"}]
    prep = conv.prepare(ChatTurn(list(msgs), tools=TOOLS))
    text = r.family.format_output("", tool_calls=[("get_weather", {"city": "Paris"})])
    ids = [*r.encode(text), r.stop_ids[0]]
    parsed = model.parse(ids, prep)
    conv.commit(prep, Generation(ids, [0.0] * len(ids), "stop"), parsed)
    c = parsed.tool_calls[0]
    msgs += [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": c.id, "type": "function",
             "function": {"name": c.name, "arguments": c.arguments}}]},
        {"role": "tool", "tool_call_id": c.id, "content": "sunny"},
    ]  # fmt: skip
    nxt = conv.prepare(ChatTurn(msgs, tools=TOOLS))
    prompt = r.tokenizer.decode(nxt.prompt_ids)
    # the model's own call, before the tool output it produced (R1 lists no tools)
    assert prompt.count("get_weather") == 1
    assert prompt.index("<｜tool▁calls▁begin｜>") < prompt.index("<｜tool▁outputs▁begin｜>")


def test_conformance_tells_a_renderer_rewrite_from_the_templates_own(family_model, monkeypatch):
    """With the renderer turning R1's ``content: None`` into ``""`` (the old behaviour) the
    run fails, naming the renderer; the template's own rewrites pass."""
    from rollhub_gateway.families.json_tools import DeepSeekV3Family

    monkeypatch.setattr(DeepSeekV3Family, "none_content_with_calls", False)
    report = run_family("deepseek_r1", family_model("deepseek_r1"))
    assert any("the renderer changed it" in f for f in report.failures), report.failures
    monkeypatch.undo()
    assert run_family("deepseek_r1", family_model("deepseek_r1")).ok


def test_all_templates_adds_training_copies(capsys):
    assert main(["--family", "lfm2", "--all-templates", "--via", "direct", "--markdown"]) == 0
    out = capsys.readouterr().out
    assert "| lfm2 | direct | lfm2_inline | 6 | 6 | 0 | 0 | 0 |" in out
    assert "| lfm2_training | direct | lfm2_inline | 6 | 6 | 0 | 0 | 0 |" in out


def test_refusal_rows_fail_a_template_that_takes_tools():
    from rollhub_gateway.conformance.templates import refusal_report

    assert refusal_report("phi3.jinja").ok
    taken = refusal_report("qwen2_5.jinja")
    assert taken.failures == ["tools were accepted by a template that cannot render them"]


def test_the_cli_passes_all_templates_through(capsys):
    # `rollhub gateway conformance --all-templates`, parsed by the real command line
    from rollhub.cli import main as rollhub_main

    argv = ["gateway", "conformance", "--family", "lfm2", "--all-templates", "--via", "direct"]
    assert rollhub_main([*argv, "--markdown"]) == 0
    assert "| lfm2_training | direct | lfm2_inline |" in capsys.readouterr().out
