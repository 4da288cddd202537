"""LFM2 / LFM2.5: a list of Python-style calls between ``<|tool_call_start|>`` and
``<|tool_call_end|>``.

The model writes one block for all of a turn's calls, its text before the block (where
the templates that render ``tool_calls`` put it) or after it (as LFM2's model cards show),
and ends the turn with ``<|im_end|>``::

    <|tool_call_start|>[get_weather(city="Paris"), get_time(tz='UTC')]<|tool_call_end|>Checking.

Values are Python literals: strings single-quoted, ``True``/``False``/``None``, numbers;
mappings and lists are JSON (``true``/``false``/``null`` accepted there). Told to "output
function calls as JSON" in the system prompt, the models write a JSON list of
``{"name": …, "arguments": {…}}`` objects in the same block instead. LFM2.5 wraps
reasoning in ``<think>…</think>``.

- ``lfm2``: templates that render ``tool_calls`` (LFM2 since its second template
  revision, LFM2.5, LFM2.5-VL).
- ``lfm2_inline``: the first LFM2 template, which lists tools and tool results but never
  reads ``tool_calls``: the model's calls are part of its text, so the call block is
  written back into the message's content, ahead of the text, as the model writes it.
"""

from __future__ import annotations

import ast
import json
import logging
from collections.abc import Sequence
from typing import Any, ClassVar

from rollhub_gateway.families.base import Family, new_call_id
from rollhub_gateway.turns import ParsedOutput, ToolCall

log = logging.getLogger(__name__)

__all__ = ["LFM2Family", "LFM2InlineFamily", "format_calls", "parse_calls"]

CALLS_OPEN, CALLS_CLOSE = "<|tool_call_start|>", "<|tool_call_end|>"
_NAMES = {"true": True, "false": False, "null": None}


def _python_value(value: object) -> str:
    """A value as LFM2's templates write it (``format_arg_value``)."""
    if isinstance(value, str):
        escaped = (
            value.replace("\\", "\\\\")
            .replace("'", "\\'")
            .replace("\n", "\\n")
            .replace("\r", "\\r")
        )
        return f"'{escaped}'"
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    return str(value)  # True/False/None and numbers, as Jinja's string filter writes them


def format_calls(calls: Sequence[tuple[str, dict[str, Any]]]) -> str:
    """One ``<|tool_call_start|>[…]<|tool_call_end|>`` block holding ``calls``."""
    body = ", ".join(
        f"{name}(" + ", ".join(f"{k}={_python_value(v)}" for k, v in args.items()) + ")"
        for name, args in calls
    )
    return f"{CALLS_OPEN}[{body}]{CALLS_CLOSE}"


def _literal(node: ast.AST) -> object:
    """A Python literal, or JSON written as Python (``true``, ``null``), from its AST."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name) and node.id in _NAMES:
        return _NAMES[node.id]
    if isinstance(node, ast.List | ast.Tuple):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        return _literal_dict(node)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        inner = _literal(node.operand)
        if not isinstance(inner, int | float) or isinstance(inner, bool):
            raise ValueError("sign before a non-number")
        return -inner if isinstance(node.op, ast.USub) else inner
    raise ValueError(f"not a literal: {ast.dump(node)[:60]}")


def _name(node: ast.AST) -> str:
    """``get_weather`` or a dotted ``ns.get_weather``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_name(node.value)}.{node.attr}"
    raise ValueError("a call needs a function name")


def parse_calls(section: str) -> list[ToolCall] | None:
    """The calls of one ``<|tool_call_start|>[…]<|tool_call_end|>`` block; ``None`` when
    the section is anything else."""
    body = section.strip()
    if not body.startswith(CALLS_OPEN):
        return None
    body = body[len(CALLS_OPEN) :]
    end = body.find(CALLS_CLOSE)
    if end < 0 or body[end + len(CALLS_CLOSE) :].strip():
        return None
    try:
        return _calls(ast.parse(body[:end].strip(), mode="eval").body)
    except (SyntaxError, RecursionError) as exc:  # neither is a ValueError
        raise ValueError(f"not a Python call list: {exc}") from exc


def _literal_dict(node: ast.Dict) -> dict[object, object]:
    """A mapping literal (see :func:`_literal`)."""
    keys = [k for k in node.keys if k is not None]
    if len(keys) != len(node.keys):
        raise ValueError("** in a mapping")
    return {_literal(k): _literal(v) for k, v in zip(keys, node.values, strict=True)}


def _calls(tree: ast.AST) -> list[ToolCall] | None:
    nodes = tree.elts if isinstance(tree, ast.List) else [tree]
    calls = []
    for node in nodes:
        if isinstance(node, ast.Dict):
            # asked for JSON in the system prompt, LFM2 writes {"name": …, "arguments": {…}}
            obj = _literal_dict(node)
            name, args = obj.get("name"), obj.get("arguments", obj.get("parameters", {}))
            if not isinstance(name, str) or not isinstance(args, dict):
                return None
            calls.append(ToolCall(new_call_id(), name, json.dumps(args, ensure_ascii=False)))
            continue
        if not isinstance(node, ast.Call) or node.args:
            return None  # positional arguments have no parameter names
        keywords: dict[str, object] = {}
        for kw in node.keywords:
            if kw.arg is None:
                return None
            keywords[kw.arg] = _literal(kw.value)
        calls.append(
            ToolCall(new_call_id(), _name(node.func), json.dumps(keywords, ensure_ascii=False))
        )
    return calls or None


class LFM2Family(Family):
    """LFM2 / LFM2.5 templates that render ``tool_calls``."""

    name = "lfm2"
    stop_tokens = ("<|im_end|>",)
    tool_markers = (CALLS_OPEN,)
    reasoning_markup: ClassVar[tuple[str, str] | None] = ("<think>", "</think>")

    def format_output(
        self,
        content: str,
        *,
        reasoning: str | None = None,
        tool_calls: Sequence[tuple[str, dict[str, Any]]] = (),
        in_reasoning: bool = False,
    ) -> str:
        # as LFM2.5's template renders a turn: "<think>…</think>", text, then the calls
        head = (
            ""
            if reasoning is None
            else ("" if in_reasoning else "<think>") + reasoning + "</think>"
        )
        return head + content + (format_calls(tool_calls) if tool_calls else "")

    def format_call(self, name: str, args: dict[str, Any], index: int) -> str:
        return format_calls([(name, args)])

    def parse_tool_section(self, section: str) -> list[ToolCall] | None:
        return parse_calls(section)

    def parse(self, text: str, *, in_reasoning: bool = False) -> ParsedOutput:
        """Reasoning, text and calls; LFM2 models often write their text *after* the call
        block (``<|tool_call_end|>Checking the status.``), so text on both sides is content."""
        reasoning, rest = self.split_reasoning(text, in_reasoning=in_reasoning)
        start = rest.find(CALLS_OPEN)
        if start < 0:
            return ParsedOutput(content=rest, reasoning=reasoning)
        end = rest.find(CALLS_CLOSE, start)
        calls = None
        if end >= 0:
            try:
                calls = parse_calls(rest[start : end + len(CALLS_CLOSE)])
            except (ValueError, KeyError, TypeError) as exc:
                log.debug("ill-formed LFM2 call block (%s)", exc)
        after = rest[end + len(CALLS_CLOSE) :].strip() if end >= 0 else ""
        if not calls or CALLS_OPEN in after:
            return ParsedOutput(content=rest, reasoning=reasoning, ill_formed=True)
        before = rest[:start].rstrip()
        content = before + (" " if before and after else "") + after
        return ParsedOutput(content=content, reasoning=reasoning, tool_calls=calls)


def _mapping(args: object) -> dict[str, Any]:
    # arguments that are not a JSON object cannot be written as keyword arguments
    return args if isinstance(args, dict) else {}


class LFM2InlineFamily(LFM2Family):
    """The first LFM2 template: tool calls are part of the assistant's text."""

    name = "lfm2_inline"
    reasoning_markup = None
    calls_in_content = True

    def format_output(
        self,
        content: str,
        *,
        reasoning: str | None = None,
        tool_calls: Sequence[tuple[str, dict[str, Any]]] = (),
        in_reasoning: bool = False,
    ) -> str:
        # the model card's order: the call block, then the text
        return (format_calls(tool_calls) if tool_calls else "") + content

    def to_template_message(self, message: dict[str, Any]) -> dict[str, Any]:
        out = super().to_template_message(message)
        calls = out.pop("tool_calls", None)
        if calls and out.get("role") == "assistant":
            markup = format_calls(
                [(c["function"]["name"], _mapping(c["function"].get("arguments"))) for c in calls]
            )
            out["content"] = markup + (out.get("content") or "")
        return out
