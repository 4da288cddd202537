"""The per-turn template environment: the same text as transformers' own rendering, the
tool schemas' JSON written once, and the sandbox still closed."""

from __future__ import annotations

import json

import jinja2
import pytest
from rollhub_gateway.chat_templates.environment import FrozenJson, compile_template, freeze_tools
from rollhub_gateway.conformance.report import CONFORMANCE_FAMILIES
from rollhub_gateway.families.locality import probe_conversations


@pytest.mark.parametrize("name", sorted(CONFORMANCE_FAMILIES))
def test_frozen_tools_render_as_transformers_renders_the_originals(name, family_model):
    r = family_model(name).renderer
    for messages, tools in probe_conversations(r):
        frozen = freeze_tools(tools)
        for end in range(2, len(messages) + 1):
            part = messages[:end]
            if any(v is None for m in part for v in m.values()):
                continue  # transformers drops None values (see test_render)
            for gen in (True, False):
                want = r.tokenizer.apply_chat_template(
                    part,
                    tools=tools,
                    chat_template=r.chat_template,
                    tokenize=False,
                    add_generation_prompt=gen,
                )
                assert r.render_text(part, frozen, generation=gen) == want
                # twice: the second render takes the tools' JSON from the frozen copies
                assert r.render_text(part, frozen, generation=gen) == want


def test_frozen_tool_json_is_written_once_per_argument_set(monkeypatch):
    template = compile_template(
        "{% for t in tools %}{{ t | tojson }}|{{ t | tojson(indent=2) }}{% endfor %}"
    )
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"a": [1, 2]}}}]
    frozen = freeze_tools(tools)
    first = template.render(tools=frozen)
    calls = []
    real = json.dumps
    monkeypatch.setattr(json, "dumps", lambda *a, **k: calls.append(a) or real(*a, **k))
    assert template.render(tools=frozen) == first
    assert calls == []  # both argument sets were kept from the first render
    assert template.render(tools=tools) == first  # plain dicts are dumped every time
    assert len(calls) == 2
    assert first == json.dumps(tools[0], ensure_ascii=False) + "|" + json.dumps(
        tools[0], ensure_ascii=False, indent=2
    )


def test_freezing_copies_so_the_caller_cannot_change_what_renders():
    tools = [{"type": "function", "function": {"name": "f"}}]
    frozen = freeze_tools(tools)
    tools[0]["function"]["name"] = "g"
    assert isinstance(frozen[0], FrozenJson)
    assert frozen[0]["function"]["name"] == "f"
    assert freeze_tools(None) is None


@pytest.mark.parametrize(
    "source",
    [
        "{{ messages[0].clear() }}",  # mutating a dict
        "{{ tools[0].clear() }}",  # mutating a frozen tool
        "{{ messages.append(1) }}",  # mutating a list
        "{{ messages[0].__class__.__mro__ }}",  # reaching Python internals
    ],
)
def test_the_sandbox_still_refuses_unsafe_access(source):
    template = compile_template(source)
    with pytest.raises(jinja2.exceptions.SecurityError):
        template.render(messages=[{"role": "user"}], tools=freeze_tools([{"a": 1}]))


def test_attribute_lookup_on_dicts_reads_items_as_the_sandbox_does():
    template = compile_template(
        "{{ m.role }}|{{ m.missing is defined }}|{{ m.items() | list | length }}|{{ t.a }}"
    )
    out = template.render(m={"role": "user", "items": "shadowed"}, t=freeze_tools([{"a": 1}])[0])
    # ``items`` is a dict method, so the attribute wins over the key, as in the sandbox
    assert out == "user|False|2|1"
