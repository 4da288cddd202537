"""The chat template alone as the judge of a history's rendering, for conformance.

The gateway converts messages to each template's form before rendering; to tell a
template's own rewrite of the history from one that conversion caused, the history is also
rendered the way a Hugging Face user hands it to the template: assistant tool-call messages
with ``content: None`` as OpenAI clients send them (``""`` for templates that cannot take
None), reasoning under both names transformers uses, arguments in the form the template
reads.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, TypeAlias

import jinja2

from rollhub_gateway.families.base import Family
from rollhub_gateway.turns import ParsedOutput

if TYPE_CHECKING:
    from rollhub_gateway.chat_templates.render import TemplateRenderer

__all__ = ["direct_message", "direct_render", "template_rewrites"]

#: tool schemas as the template reads them (None or empty: no tools)
Tools: TypeAlias = "list[dict[str, Any]] | None"


def direct_message(fam: Family, parsed: ParsedOutput) -> dict[str, Any]:
    """Our answer as a Hugging Face user writes it for ``apply_chat_template``: ``content``
    None next to tool calls, the reasoning under both names transformers uses, arguments in
    the form the template reads."""
    msg: dict[str, Any] = {"role": "assistant", "content": parsed.content or None}
    if msg["content"] is None and not parsed.tool_calls:
        msg["content"] = ""
    if parsed.reasoning:
        msg["reasoning_content"] = msg["thinking"] = parsed.reasoning
    if parsed.tool_calls and fam.calls_in_content:
        # the template shows calls only as the text the model wrote (the first LFM2 one)
        calls = [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls]
        msg["content"] = fam.format_output(parsed.content or "", tool_calls=calls)
    elif parsed.tool_calls:
        msg["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {
                "name": c.name,
                "arguments": c.arguments if fam.arguments_as_text else json.loads(c.arguments),
            }}
            for c in parsed.tool_calls
        ]  # fmt: skip
    return msg


def direct_render(
    r: TemplateRenderer, messages: list[dict[str, Any]], tools: Tools, generation: bool
) -> str:
    """``messages`` rendered by the chat template alone (none of the renderer's message
    conversion), tool-call messages with ``content: None`` as OpenAI clients send them, or
    with ``""`` for templates that cannot take None (they fail, or print ``None``)."""
    empty = [
        {**m, "content": ""} if m.get("role") == "assistant" and m.get("content") is None else m
        for m in messages
    ]
    as_empty = _template_only(r, empty, tools, generation)
    try:
        as_none = _template_only(r, messages, tools, generation)
    except (TypeError, jinja2.exceptions.UndefinedError):
        return as_empty
    return as_empty if as_none.count("None") > as_empty.count("None") else as_none


def _template_only(
    r: TemplateRenderer, messages: list[dict[str, Any]], tools: Tools, generation: bool
) -> str:
    # the compiled template itself: transformers' message normalisation drops
    # ``content: None``, which DeepSeek-R1's template needs to render tool calls
    if r._compiled is None:
        text = r.tokenizer.apply_chat_template(
            messages, tools=list(tools) if tools else None, chat_template=r.chat_template,
            tokenize=False, add_generation_prompt=generation, **r.template_kwargs,
        )  # fmt: skip
        assert isinstance(text, str)  # tokenize=False renders text
        return text
    return r._compiled.render(
        messages=messages, tools=tools or None, documents=None,
        add_generation_prompt=generation, **{**r._template_vars, **r.template_kwargs},
    )  # fmt: skip


def template_rewrites(
    r: TemplateRenderer, direct: list[dict[str, Any]], prev_len: int, tools: Tools
) -> bool:
    """Whether the template itself renders the previous history differently inside the new
    one (``direct``: the history as a user hands it to the template; its first ``prev_len``
    messages were the previous prompt, the next one our answer)."""
    if prev_len == 0:
        return True
    prompt = direct_render(r, direct[:prev_len], tools, True)
    through = direct_render(r, direct[: prev_len + 1], tools, False)
    if not through.startswith(prompt):  # the generation prompt is not how history renders
        return True
    return not direct_render(r, direct, tools, True).startswith(through)
