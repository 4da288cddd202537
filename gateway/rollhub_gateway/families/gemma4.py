"""Gemma 4: ``<|tool_call>call:NAME{key:value,…}<tool_call|>`` tool calls.

After the generation prompt ``<|turn>model\\n`` the model writes, for example::

    <|channel>thought\\n…reasoning…\\n<channel|><|tool_call>call:get_weather{city:<|"|>Paris<|"|>}<tool_call|>

and stops on ``<|tool_response>``: the template puts the tool results right after the
calls, inside the same model turn (``<|tool_response>response:NAME{…}<tool_response|>``),
and the model goes on from there without a new turn header. A plain answer ends with
``<turn|>``. Argument values are Gemma's own notation: strings between ``<|"|>``
delimiters, bare keys, numbers and ``true``/``false`` as in JSON, ``{…}`` and ``[…]`` for
mappings and lists. The template writes a mapping's keys sorted and the content of a
tool-call message after the tool results, so a message holds either text or calls.

The same markup serves every Gemma 4 template revision and DiffusionGemma.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rollhub_gateway.families.base import Family, new_call_id
from rollhub_gateway.json_value import JSON
from rollhub_gateway.turns import ToolCall

__all__ = ["Gemma4Family", "format_value", "parse_arguments"]

CALL_OPEN, CALL_CLOSE = "<|tool_call>", "<tool_call|>"
QUOTE = '<|"|>'
THOUGHT_OPEN, THOUGHT_CLOSE = "<|channel>thought", "<channel|>"
_BARE = {"true": True, "false": False, "null": None, "None": None}


def format_value(value: object) -> str:
    """A value in Gemma 4's argument notation, as its template writes it (keys sorted)."""
    if isinstance(value, str):
        return QUOTE + value + QUOTE
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{format_value(value[k])}" for k in sorted(value)) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    return "null" if value is None else str(value)


class _Reader:
    """Recursive-descent reader of Gemma 4's argument notation."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def fail(self, what: str) -> ValueError:
        return ValueError(f"{what} at offset {self.pos} of {self.text[:80]!r}")

    def skip(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t\r\n":
            self.pos += 1

    def peek(self, s: str) -> bool:
        return self.text.startswith(s, self.pos)

    def expect(self, s: str) -> None:
        self.skip()
        if not self.peek(s):
            raise self.fail(f"expected {s!r}")
        self.pos += len(s)

    def value(self) -> JSON:
        self.skip()
        if self.peek(QUOTE):
            self.pos += len(QUOTE)
            end = self.text.find(QUOTE, self.pos)
            if end < 0:
                raise self.fail("unterminated string")
            out, self.pos = self.text[self.pos : end], end + len(QUOTE)
            return out
        if self.peek("{"):
            return self.mapping()
        if self.peek("["):
            self.pos += 1
            items: list[Any] = []
            self.skip()
            if self.peek("]"):
                self.pos += 1
                return items
            while True:
                items.append(self.value())
                self.skip()
                if self.peek("]"):
                    self.pos += 1
                    return items
                self.expect(",")
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] not in ",}]":
            self.pos += 1
        word = self.text[start : self.pos].strip()
        if word in _BARE:
            return _BARE[word]
        try:
            return json.loads(word)  # a number
        except ValueError:
            raise self.fail(f"bare value {word!r}") from None

    def key(self) -> str:
        self.skip()
        if self.peek(QUOTE):
            value = self.value()
            return str(value)
        end = self.text.find(":", self.pos)
        if end < 0:
            raise self.fail("expected a key")
        out, self.pos = self.text[self.pos : end].strip(), end
        if not out or any(c in out for c in "{}[],<>"):
            raise self.fail(f"bad key {out!r}")
        return out

    def mapping(self) -> dict[str, Any]:
        self.expect("{")
        out: dict[str, Any] = {}
        self.skip()
        if self.peek("}"):
            self.pos += 1
            return out
        while True:
            k = self.key()
            self.expect(":")
            out[k] = self.value()
            self.skip()
            if self.peek("}"):
                self.pos += 1
                return out
            self.expect(",")


def parse_arguments(text: str) -> dict[str, Any]:
    """``{key:value,…}`` in Gemma 4's notation as a dict.

    :raises ValueError: not one well-formed mapping.
    """
    reader = _Reader(text)
    try:
        out = reader.mapping()
    except RecursionError as exc:  # nesting deeper than Python's stack
        raise ValueError("arguments nested too deeply") from exc
    reader.skip()
    if reader.pos != len(text):
        raise reader.fail("text after the arguments")
    return out


class Gemma4Family(Family):
    """Gemma 4 (and DiffusionGemma): ``<|tool_call>`` calls, ``<|channel>thought`` reasoning."""

    name = "gemma4"
    content_with_calls = False
    stop_tokens = ("<turn|>", "<|tool_response>", "<eos>")
    tool_markers = (CALL_OPEN,)
    reasoning_markup = (THOUGHT_OPEN, THOUGHT_CLOSE)

    def format_output(
        self,
        content: str,
        *,
        reasoning: str | None = None,
        tool_calls: Sequence[tuple[str, dict[str, Any]]] = (),
        in_reasoning: bool = False,
    ) -> str:
        head = ""
        if reasoning is not None:
            # the template's own rendering: '<|channel>thought\n' + text + '\n<channel|>'
            head = ("" if in_reasoning else THOUGHT_OPEN + "\n") + reasoning + "\n" + THOUGHT_CLOSE
        calls = "".join(self.format_call(n, a, i) for i, (n, a) in enumerate(tool_calls))
        return head + content + calls

    def format_call(self, name: str, args: dict[str, Any], index: int) -> str:
        return f"{CALL_OPEN}call:{name}{format_value(args)}{CALL_CLOSE}"

    def parse_tool_section(self, section: str) -> list[ToolCall] | None:
        calls = []
        rest = section.strip()
        while rest:
            if not rest.startswith(CALL_OPEN + "call:"):
                return None
            end = rest.find(CALL_CLOSE)
            if end < 0:
                return None
            body = rest[len(CALL_OPEN) + len("call:") : end]
            brace = body.find("{")
            name = body[:brace].strip() if brace > 0 else ""
            if not name or any(c in name for c in " <>{}"):
                return None
            args = parse_arguments(body[brace:])
            calls.append(ToolCall(new_call_id(), name, json.dumps(args, ensure_ascii=False)))
            rest = rest[end + len(CALL_CLOSE) :].strip()
        return calls or None
