"""The scripted model and agent of the conformance run.

:func:`script` is the session (tool calls, parallel calls, answers, follow-up questions);
:func:`output_ids` is what a model of the family samples for a step, in the family's exact
markup and with the stop token its template expects; :func:`agent_message` is the answer
as an OpenAI client sends it back (reasoning dropped, arguments as JSON text).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from rollhub_gateway.token_codec import decode_text, token_id
from rollhub_gateway.turns import ParsedOutput

if TYPE_CHECKING:
    from rollhub_gateway.chat_model import HFChatModel
    from rollhub_gateway.chat_templates.render import TemplateRenderer

log = logging.getLogger(__name__)

__all__ = ["TOOLS", "Step", "agent_message", "output_ids", "script", "stop_token"]

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather of a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "Current time in a time zone.",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string"}},
                       "required": ["tz"]}}},
]  # fmt: skip

#: (reasoning, content, tool calls, follow-up user message after it)
Step = tuple[str | None, str, list[tuple[str, dict[str, Any]]], str | None]


def script(parallel: bool, tools: bool) -> list[Step]:
    """The session's steps: a tool loop (with parallel calls where the family has them), a
    follow-up question, a call next to text, and plain answers; chat only without tools."""
    if not tools:
        return [
            (None, "Hello! How can I help?", [], "What is 2+2?"),
            (None, "2+2 is 4.", [], "And 3+3?"),
            (None, "3+3 is 6.", [], "Thanks."),
            (None, "You are welcome.", [], None),
        ]
    second = [("get_time", {"tz": "UTC"})]
    if parallel:
        second.append(("get_weather", {"city": "Berlin"}))
    return [
        ("The user wants the weather first.", "", [("get_weather", {"city": "Paris"})], None),
        ("Now the time.", "", second, None),
        ("I have both.", "Sunny in Paris, 12:00 UTC.", [], "And in Rome?"),
        ("Look up Rome.", "Checking Rome.", [("get_weather", {"city": "Rome"})], None),
        ("Done.", "Rainy in Rome.", [], "Thanks!"),
        ("Polite close.", "You are welcome.", [], None),
    ]


def agent_message(parsed: ParsedOutput) -> dict[str, Any]:
    """The assistant message an OpenAI client sends back: no reasoning, JSON-text args."""
    msg: dict[str, Any] = {"role": "assistant", "content": parsed.content or None}
    if parsed.tool_calls:
        msg["tool_calls"] = [
            {"id": c.id, "type": "function",
             "function": {"name": c.name, "arguments": c.arguments}}
            for c in parsed.tool_calls
        ]  # fmt: skip
    return msg


def output_ids(
    model: HFChatModel, prompt_ids: list[int], step: Step, *, opens: bool | None = None
) -> list[int]:
    """The ids a model of the family samples for a script step after ``prompt_ids``.

    :param opens: the prompt opened the reasoning block; read off the prompt when ``None``.
    """
    r = model.renderer
    fam = r.family
    reasoning, content, calls, _follow_up = step
    if calls and not fam.content_with_calls:
        content = ""
    tail = decode_text(r.tokenizer, prompt_ids[-8:], skip_special_tokens=False).rstrip()
    if opens is None:
        markup = fam.reasoning_markup
        opens = markup is not None and tail.endswith(markup[0])
    # a prompt that already closed the reasoning block (Qwen3.5 with thinking off) gets
    # none; families with reasoning messages (GPT-OSS, ATEM) always may write one
    writes = fam.has_reasoning and not (
        fam.reasoning_markup is not None and tail.endswith(fam.reasoning_markup[1])
    )
    text = fam.format_output(
        content, reasoning=reasoning if writes else None, tool_calls=calls, in_reasoning=opens
    )
    return [*r.encode(text), token_id(r.tokenizer, stop_token(r, bool(calls)))]


def stop_token(r: TemplateRenderer, calls: bool) -> str:
    """The token a model of the renderer's family ends a turn with (with or without calls)."""
    family = r.family.name
    if family == "chatml":
        return "<|im_end|>"
    if family == "gpt_oss":
        return "<|call|>" if calls else "<|return|>"
    if family == "glm4_moe":
        return "<|observation|>" if calls else "<|user|>"
    if family == "gemma4":
        return _gemma4_call_end(r) if calls else "<turn|>"
    return r.stop_texts[r.tokenizer.eos_token_id]


def _gemma4_call_end(r: TemplateRenderer) -> str:
    """What a Gemma 4 template writes after a turn's last call: ``<|tool_response>`` (the
    model's trained stop, from the second revision on) or ``<turn|>`` (the release one)."""
    call = r.family.to_template_message(
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
    )  # fmt: skip
    text = r.render_text([{"role": "user", "content": "x"}, call], None, generation=False)
    return "<|tool_response>" if text.rstrip().endswith("<|tool_response>") else "<turn|>"
