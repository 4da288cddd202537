"""Muse Glimmer (the ATEM protocol): an output is a run of addressed messages.

After the generation prompt ``<|start|>assistant`` the model writes, for example::

     to=self<|message|>…reasoning…<|eom|><|start|>assistant to=get_weather<|message|>
    <atem:function_calls>
    <atem:invoke name="get_weather">
    <atem:parameter name="city">Paris</atem:parameter>
    </atem:invoke>
    </atem:function_calls>

and ends its turn with ``<|eot|>``; ``<|eom|>`` ends one message of a turn that goes on.
A message to ``self`` is reasoning, one to ``user`` is the answer, one to any other
recipient is a call of that tool. Parameter values are written as they are (strings,
numbers) or as JSON (lists, mappings, ``true``/``false``/``null``). The template renders a
message's text or its calls, not both.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, Literal

from rollhub_gateway.families.base import Family, IncrementalDecoder, new_call_id, partial_suffix
from rollhub_gateway.json_value import JSON
from rollhub_gateway.turns import OutputDelta, ParsedOutput, StreamingParser, ToolCall

__all__ = ["AtemFamily", "format_invoke"]

START, MESSAGE, EOM = "<|start|>", "<|message|>", "<|eom|>"
_RECIPIENT = re.compile(r"^\s*(?:assistant)?\s*to=(\S+)\s*$")
_BLOCK = re.compile(r"^\s*<atem:function_calls>(.*)</atem:function_calls>\s*$", re.S)
_INVOKE = re.compile(r'<atem:invoke name="([^"]+)">(.*?)</atem:invoke>', re.S)
_PARAM = re.compile(r'<atem:parameter name="([^"]+)">(.*?)</atem:parameter>', re.S)


def _text(value: object) -> str:
    """A parameter value as the template writes it."""
    if isinstance(value, bool) or value is None or isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _value(text: str) -> JSON | str:
    """Strings are written as they are; anything that reads as JSON is JSON."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text


def format_invoke(name: str, args: dict[str, Any]) -> str:
    """One ``<atem:function_calls>`` block calling ``name``."""
    params = "".join(
        f'<atem:parameter name="{k}">{_text(v)}</atem:parameter>\n' for k, v in args.items()
    )
    return (
        f'<atem:function_calls>\n<atem:invoke name="{name}">\n{params}'
        "</atem:invoke>\n</atem:function_calls>"
    )


def _messages(text: str) -> list[tuple[str | None, str]] | None:
    """``(recipient, body)`` of each message; ``None`` when a header is ill-formed."""
    out = []
    for chunk in text.split(START):
        if not chunk.strip():
            continue
        header, sep, body = chunk.partition(MESSAGE)
        if not sep:
            return None
        m = _RECIPIENT.match(header)
        if m is None and header.strip() not in ("", "assistant"):
            return None
        out.append((m.group(1) if m else None, body.removesuffix(EOM)))
    return out


def _calls(body: str) -> list[ToolCall] | None:
    """The calls of one ``<atem:function_calls>`` block; ``None`` when ill-formed."""
    block = _BLOCK.match(body)
    if block is None:
        return None
    invokes = _INVOKE.findall(block.group(1))
    if not invokes or _INVOKE.sub("", block.group(1)).strip():
        return None
    calls = []
    for name, params in invokes:
        if _PARAM.sub("", params).strip():
            return None
        args = {k: _value(v) for k, v in _PARAM.findall(params)}
        calls.append(ToolCall(new_call_id(), name, json.dumps(args, ensure_ascii=False)))
    return calls


class AtemFamily(Family):
    """Muse Glimmer: messages addressed to ``self``, a tool, or ``user``."""

    name = "atem"
    content_with_calls = False
    reasoning_messages = True
    stop_tokens = ("<|eot|>",)
    tool_markers = ()

    def format_output(
        self,
        content: str,
        *,
        reasoning: str | None = None,
        tool_calls: Sequence[tuple[str, dict[str, Any]]] = (),
        in_reasoning: bool = False,
    ) -> str:
        parts = []
        if reasoning is not None:
            parts.append(f" to=self{MESSAGE}{reasoning}")
        if tool_calls:
            parts += [f" to={n}{MESSAGE}{format_invoke(n, a)}" for n, a in tool_calls]
        else:
            parts.append(f" to=user{MESSAGE}{content}")
        # the generation prompt opens the first message; later ones open their own
        return (EOM + START + "assistant").join(parts)

    def parse(self, text: str, *, in_reasoning: bool = False) -> ParsedOutput:
        msgs = _messages(text)
        if msgs is None:
            return ParsedOutput(content=text, ill_formed=True)
        reasoning, content, calls = [], [], []
        for to, body in msgs:
            if to == "self":
                reasoning.append(body)
            elif to in (None, "user"):
                content.append(body)
            else:
                found = _calls(body)
                if found is None:
                    return ParsedOutput(content=text, ill_formed=True)
                calls += found
        return ParsedOutput(
            content="".join(content), reasoning="\n".join(reasoning) or None, tool_calls=calls
        )

    def new_stream_parser(
        self, decoder: IncrementalDecoder, *, in_reasoning: bool
    ) -> StreamingParser:
        return AtemStreamParser(self, decoder)


class AtemStreamParser:
    """Streams ``self`` messages as reasoning and ``user`` ones as content; holds calls.

    The deltas concatenate to :meth:`AtemFamily.parse`'s reasoning (messages joined by a
    newline) and content.
    """

    def __init__(self, family: AtemFamily, decoder: IncrementalDecoder) -> None:
        self.family = family
        self.decoder = decoder
        self._buf = ""
        self._pos = 0
        self._kind: Literal["reasoning", "content", "tool"] | None = None  # None: a header
        self._reasoning_done = 0
        self._body_started = False

    def feed(self, token_ids: list[int]) -> list[OutputDelta]:
        """Consume ids; return text that is safe to show now."""
        self._buf += self.decoder.feed(token_ids)
        out: list[OutputDelta] = []
        while True:
            rest = self._buf[self._pos :]
            if self._kind is None:
                i = rest.find(MESSAGE)
                if i < 0:
                    return out
                m = _RECIPIENT.match(rest[:i].replace(START, ""))
                to = m.group(1) if m else None
                self._kind = (
                    "reasoning" if to == "self" else "content" if to in (None, "user") else "tool"
                )
                self._pos += i + len(MESSAGE)
                self._body_started = False
                continue
            end = rest.find(EOM)
            body = rest[:end] if end >= 0 else rest[: len(rest) - partial_suffix(rest, (EOM,))]
            if self._kind != "tool" and body:
                if self._kind == "reasoning" and self._reasoning_done and not self._body_started:
                    out.append(OutputDelta("reasoning", "\n"))
                out.append(OutputDelta(self._kind, body))
                self._body_started = True
            if end < 0:
                if self._kind != "tool":
                    self._pos += len(body)
                return out
            self._pos += end + len(EOM)
            self._reasoning_done += self._kind == "reasoning"
            self._kind = None

    def finish(self) -> ParsedOutput:
        """The whole output, parsed from the full text."""
        return self.family.parse(self.decoder.final_text())
