"""Families with bare JSON or DeepSeek-delimited tool calls.

- ``llama3``: Llama 3.1 / 3.2: a tool call is the whole output as
  ``{"name": …, "parameters": {…}}``, optionally after ``<|python_tag|>``.
- ``deepseek_v3``: DeepSeek-V3 / R1: ``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function
  <｜tool▁sep｜>name\\n```json\\n{…}\\n```<｜tool▁call▁end｜>…<｜tool▁calls▁end｜>`` and
  ``<think>`` reasoning.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from rollhub_gateway.families.base import Family, new_call_id
from rollhub_gateway.turns import ParsedOutput, ToolCall

__all__ = ["DeepSeekV3Family", "Llama3Family"]

PYTHON_TAG = "<|python_tag|>"


class Llama3Family(Family):
    """Llama 3.1 / 3.2 JSON tool calls."""

    name = "llama3"
    content_with_calls = False
    stop_tokens = ("<|eot_id|>", "<|eom_id|>", "<|end_of_text|>")
    tool_markers = (PYTHON_TAG,)

    def tool_section_start(self, text: str) -> int | None:
        i = text.find(PYTHON_TAG)
        if i >= 0:
            return i
        stripped = text.lstrip()
        # a tool call is the whole message: a JSON object right at the start
        if stripped.startswith("{"):
            return len(text) - len(stripped)
        return None

    def parse(self, text: str, *, in_reasoning: bool = False) -> ParsedOutput:
        out = super().parse(text, in_reasoning=in_reasoning)
        if out.ill_formed and PYTHON_TAG not in text and '"name"' not in text:
            # a JSON-looking answer that was never meant as a call is plain content
            return ParsedOutput(content=text)
        return out

    def parse_tool_section(self, section: str) -> list[ToolCall] | None:
        body = section.strip()
        if body.startswith(PYTHON_TAG):
            body = body[len(PYTHON_TAG) :].strip()
        calls = []
        # several calls may be separated by ';' (Llama 3.2 prompt format)
        for part in _split_json_objects(body):
            obj = json.loads(part)
            if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
                return None
            args = obj.get("parameters", obj.get("arguments", {}))
            if not isinstance(args, dict):
                return None
            calls.append(ToolCall(new_call_id(), obj["name"], json.dumps(args, ensure_ascii=False)))
        return calls or None

    def format_call(self, name: str, args: dict[str, Any], index: int) -> str:
        body = json.dumps({"name": name, "parameters": args}, ensure_ascii=False)
        return ("; " if index else "") + body


def _split_json_objects(text: str) -> list[str]:
    """Top-level JSON objects of ``text`` separated by ``;`` or whitespace."""
    dec = json.JSONDecoder()
    parts, pos = [], 0
    while pos < len(text):
        while pos < len(text) and text[pos] in " \t\r\n;":
            pos += 1
        if pos >= len(text):
            break
        _, end = dec.raw_decode(text, pos)
        parts.append(text[pos:end])
        pos = end
    return parts


CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"
_DS_CALL = re.compile(
    re.escape(CALL_BEGIN)
    + r"(\w+)"
    + re.escape(SEP)
    + r"([^\n]+)\n```(?:json)?\n(.*?)\n```"
    + re.escape(CALL_END),
    re.S,
)


class DeepSeekV3Family(Family):
    """DeepSeek-V3 / R1 tool calls and reasoning."""

    name = "deepseek_v3"
    stop_tokens = ("<｜end▁of▁sentence｜>",)
    tool_markers = (CALLS_BEGIN,)
    reasoning_markup = ("<think>", "</think>")
    arguments_as_text = True
    none_content_with_calls = True

    def format_output(
        self,
        content: str,
        *,
        reasoning: str | None = None,
        tool_calls: Sequence[tuple[str, dict[str, Any]]] = (),
        in_reasoning: bool = False,
    ) -> str:
        text = super().format_output(content, reasoning=reasoning, in_reasoning=in_reasoning)
        if tool_calls:
            text += (
                CALLS_BEGIN
                + "\n".join(
                    f"{CALL_BEGIN}function{SEP}{name}\n```json\n{json.dumps(args)}\n```{CALL_END}"
                    for name, args in tool_calls
                )
                + CALLS_END
            )
        return text

    def parse_tool_section(self, section: str) -> list[ToolCall] | None:
        body = section.strip()
        if not body.startswith(CALLS_BEGIN):
            return None
        body = body[len(CALLS_BEGIN) :]
        if body.endswith(CALLS_END):
            body = body[: -len(CALLS_END)]
        calls, pos = [], 0
        for m in _DS_CALL.finditer(body):
            if body[pos : m.start()].strip():
                return None
            json.loads(m.group(3))
            calls.append(ToolCall(new_call_id(), m.group(2).strip(), m.group(3).strip()))
            pos = m.end()
        if body[pos:].strip() or not calls:
            return None
        return calls
