"""Every chat template the installed TRL ships is accounted for: a template with a tool-call
syntax passes the conformance session (TRL's training copies too), one without refuses
tools with a clear error before anything is sampled."""

from __future__ import annotations

import openai
import pytest
from rollhub.errors import GatewayError
from rollhub_gateway.chat_model import build_chat_model
from rollhub_gateway.conformance import run_family
from rollhub_gateway.conformance.report import CONFORMANCE_FAMILIES
from rollhub_gateway.conformance.script import TOOLS
from rollhub_gateway.conformance.templates import (
    NO_TOOL_TEMPLATES,
    TEMPLATE_FILES,
    tokenizer_for,
    trl_template_names,
)
from rollhub_gateway.engines.scripted import ScriptedBackend
from rollhub_gateway.families import detect_family
from rollhub_gateway.gateway import Gateway
from rollhub_gateway.http.serving import ThreadedGateway
from rollhub_gateway.testing_tokenizers import trl_template
from rollhub_gateway.turns import ChatTurn

BY_FILE = {f: n for n, f in TEMPLATE_FILES.items()}
TRAINING = [n for n in trl_template_names() if n.endswith("_training.jinja")]
TOOL_TRAINING = [n for n in TRAINING if n.replace("_training", "") in BY_FILE]


def _mentions_tools(text: str) -> bool:
    return "tool_calls" in text or "tools" in text


def test_every_trl_template_is_accounted_for():
    originals = [n for n in trl_template_names() if n not in TRAINING]
    unknown = [n for n in originals if n not in BY_FILE and n not in NO_TOOL_TEMPLATES]
    assert not unknown, f"new TRL templates: give them a conformance name or a reason: {unknown}"
    assert set(BY_FILE) <= set(originals)
    assert set(TEMPLATE_FILES) <= set(CONFORMANCE_FAMILIES)
    for name in TRAINING:
        assert name.replace("_training", "") in originals
    # the split follows the templates' own text: those that list tools or render calls
    # have a conformance name
    assert [n for n in NO_TOOL_TEMPLATES if _mentions_tools(trl_template(n))] == []
    assert [n for n in BY_FILE if not _mentions_tools(trl_template(n))] == []


@pytest.mark.parametrize("training", TRAINING)
def test_training_copies_are_detected_as_their_original(training):
    original = training.replace("_training", "")
    want, got = detect_family(trl_template(original)), detect_family(trl_template(training))
    assert (got.name if got else None) == (want.name if want else None)


@pytest.mark.parametrize("training", TOOL_TRAINING)
def test_training_copies_pass_the_conformance_session(training):
    name = BY_FILE[training.replace("_training", "")]
    model = build_chat_model(
        name, tokenizer=tokenizer_for(name), chat_template=trl_template(training)
    )
    report = run_family(name, model)
    assert report.ok, report.failures
    assert report.in_records == report.sampled > 0


@pytest.mark.parametrize("template", NO_TOOL_TEMPLATES)
def test_templates_without_tool_syntax_refuse_tools(template):
    # a vocabulary with a BOS token: some of these templates require one
    model = build_chat_model(
        "m", tokenizer=tokenizer_for("llama3_1"), chat_template=trl_template(template)
    )
    assert not model.supports_tools()
    conv = model.new_conversation("s")
    with pytest.raises(GatewayError, match="cannot render tools") as info:
        conv.prepare(ChatTurn([{"role": "user", "content": "hi"}], tools=TOOLS))
    assert info.value.field == "family"
    # without tools the template still serves
    assert conv.prepare(ChatTurn([{"role": "user", "content": "hi"}])).prompt_ids


def test_tools_refused_with_a_400_before_sampling():
    model = build_chat_model(
        "m", tokenizer=tokenizer_for("qwen2_5"), chat_template=trl_template("gemma3.jinja")
    )
    backend = ScriptedBackend()
    with ThreadedGateway(Gateway(backend, model)) as gw:
        s = gw.open_session("refused")
        client = openai.OpenAI(base_url=gw.base_url, api_key=s.key, max_retries=0)
        with pytest.raises(openai.BadRequestError, match="cannot render tools"):
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], tools=TOOLS
            )
    assert backend.prompts == []


@pytest.mark.parametrize("name", sorted(TEMPLATE_FILES))
def test_detection_survives_a_reworded_revision(name):
    # structure, not bytes: whitespace and wording changes resolve to the same family
    text = trl_template(TEMPLATE_FILES[name])
    edited = text.replace("{{- ", "{{ ").replace("You are", "Thou art") + "\n"
    found = detect_family(edited)
    assert found is not None and found.name == CONFORMANCE_FAMILIES[name][0]
