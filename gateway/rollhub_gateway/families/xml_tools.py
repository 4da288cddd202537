"""Families whose tool calls sit inside ``<tool_call>…</tool_call>`` tags.

- ``chatml``: plain ChatML (SmolLM2's own template): no tools.
- ``hermes``: ``<tool_call>\\n{"name": …, "arguments": {…}}\\n</tool_call>`` (Qwen2.5,
  Hermes, Mistral-style templates that adopted the Hermes markup).
- ``qwen3``: Hermes markup plus a ``<think>…</think>`` reasoning block.
- ``qwen3_coder``: Qwen3.5/3.6: ``<tool_call>\\n<function=name>\\n<parameter=k>\\nv\\n
  </parameter>\\n</function>\\n</tool_call>`` and reasoning.
- ``glm4_moe``: GLM-4.5: ``<tool_call>name\\n<arg_key>k</arg_key>\\n<arg_value>v
  </arg_value>\\n</tool_call>`` and reasoning.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from rollhub_gateway.families.base import Family, new_call_id
from rollhub_gateway.json_value import JSON
from rollhub_gateway.turns import ToolCall

__all__ = ["ChatMLFamily", "GLM4MoeFamily", "HermesFamily", "Qwen3CoderFamily", "Qwen3Family"]

_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)


def _blocks(section: str) -> list[str] | None:
    """Bodies of consecutive ``<tool_call>`` blocks; ``None`` when anything else is left."""
    bodies = []
    pos = 0
    for m in _BLOCK.finditer(section):
        if section[pos : m.start()].strip():
            return None
        bodies.append(m.group(1))
        pos = m.end()
    if section[pos:].strip() or not bodies:
        return None
    return bodies


def _value(text: str) -> JSON | str:
    """A parameter value: JSON when it parses as JSON, else the raw string."""
    try:
        return json.loads(text)
    except ValueError:
        return text


class ChatMLFamily(Family):
    """Plain ChatML without tools (SmolLM2's GGUF template)."""

    name = "chatml"
    supports_tools = False


class HermesFamily(Family):
    """JSON tool calls in ``<tool_call>`` tags (Qwen2.5, Hermes, Mistral-style)."""

    name = "hermes"
    tool_markers = ("<tool_call>",)

    def parse_tool_section(self, section: str) -> list[ToolCall] | None:
        bodies = _blocks(section)
        if bodies is None:
            return None
        calls = []
        for body in bodies:
            obj = json.loads(body)
            if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
                return None
            args = obj.get("arguments", obj.get("parameters", {}))
            if isinstance(args, str):
                json.loads(args)  # arguments given as JSON text must be JSON
                text = args
            elif isinstance(args, dict):
                text = json.dumps(args, ensure_ascii=False)
            else:
                return None
            calls.append(ToolCall(new_call_id(), obj["name"], text))
        return calls

    def format_call(self, name: str, args: dict[str, Any], index: int) -> str:
        body = json.dumps({"name": name, "arguments": args}, ensure_ascii=False)
        return ("\n" if index else "") + f"<tool_call>\n{body}\n</tool_call>"


class Qwen3Family(HermesFamily):
    """Hermes tool calls plus ``<think>`` reasoning (Qwen3)."""

    name = "qwen3"
    reasoning_markup = ("<think>", "</think>")


_FUNCTION = re.compile(r"^\s*<function=([^>\n]+)>(.*?)</function>\s*$", re.S)
_PARAM = re.compile(r"<parameter=([^>\n]+)>\n?(.*?)\n?</parameter>", re.S)


class Qwen3CoderFamily(Qwen3Family):
    """XML function/parameter tool calls plus reasoning (Qwen3.5, Qwen3.6, Qwen3-Coder)."""

    name = "qwen3_coder"

    def parse_tool_section(self, section: str) -> list[ToolCall] | None:
        bodies = _blocks(section)
        if bodies is None:
            return None
        calls = []
        for body in bodies:
            m = _FUNCTION.match(body)
            if m is None:
                return None
            params_text = m.group(2)
            args = {k.strip(): _value(v) for k, v in _PARAM.findall(params_text)}
            if _PARAM.sub("", params_text).strip():
                return None
            calls.append(
                ToolCall(new_call_id(), m.group(1).strip(), json.dumps(args, ensure_ascii=False))
            )
        return calls

    def format_call(self, name: str, args: dict[str, Any], index: int) -> str:
        params = "".join(
            f"<parameter={k}>\n{v if isinstance(v, str) else json.dumps(v)}\n</parameter>\n"
            for k, v in args.items()
        )
        return (
            "\n" if index else ""
        ) + f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"


_ARG = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.S)


class GLM4MoeFamily(Family):
    """GLM-4.5 / GLM-4.6: ``<tool_call>name`` with ``<arg_key>/<arg_value>`` pairs."""

    name = "glm4_moe"
    # GLM ends a turn by opening the next one
    stop_tokens = ("<|user|>", "<|observation|>", "<|endoftext|>")
    tool_markers = ("<tool_call>",)
    reasoning_markup = ("<think>", "</think>")

    def parse_tool_section(self, section: str) -> list[ToolCall] | None:
        bodies = _blocks(section)
        if bodies is None:
            return None
        calls = []
        for body in bodies:
            name, _, rest = body.partition("<arg_key>")
            name = name.strip()
            if not name or "<" in name:
                return None
            rest = "<arg_key>" + rest if rest else ""
            args = {k.strip(): _value(v) for k, v in _ARG.findall(rest)}
            if _ARG.sub("", rest).strip():
                return None
            calls.append(ToolCall(new_call_id(), name, json.dumps(args, ensure_ascii=False)))
        return calls

    def format_output(
        self,
        content: str,
        *,
        reasoning: str | None = None,
        tool_calls: Sequence[tuple[str, dict[str, Any]]] = (),
        in_reasoning: bool = False,
    ) -> str:
        # GLM writes "\n<think>…</think>" right after "<|assistant|>", then "\n" + content
        text = "\n<think>" + (reasoning or "") + "</think>"
        if content:
            text += "\n" + content
        for name, args in tool_calls:
            pairs = "".join(
                f"<arg_key>{k}</arg_key>\n<arg_value>"
                f"{v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}</arg_value>\n"
                for k, v in args.items()
            )
            text += f"\n<tool_call>{name}\n{pairs}</tool_call>"
        return text
