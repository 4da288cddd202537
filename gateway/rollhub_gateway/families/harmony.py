"""GPT-OSS (the harmony format): an output is a run of channel messages.

After the generation prompt ``<|start|>assistant`` the model writes, for example::

    <|channel|>analysis<|message|>…reasoning…<|end|>
    <|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{…}<|call|>

or ends with ``<|channel|>final<|message|>…answer…<|return|>``. ``analysis`` is reasoning,
``final`` (and ``commentary`` without a recipient) is content, and a ``commentary`` message
addressed ``to=functions.NAME`` is a tool call. ``<|call|>`` and ``<|return|>`` are stop ids.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, Literal

from rollhub_gateway.families.base import Family, IncrementalDecoder, new_call_id, partial_suffix
from rollhub_gateway.turns import OutputDelta, ParsedOutput, StreamingParser, ToolCall

__all__ = ["HarmonyFamily"]

START, CHANNEL, MESSAGE, END = "<|start|>", "<|channel|>", "<|message|>", "<|end|>"
_RECIPIENT = re.compile(r"to=([^\s<]+)")
_CHANNEL = re.compile(re.escape(CHANNEL) + r"(\w+)")


def _header(header: str) -> tuple[str | None, str | None]:
    """``(channel, recipient)`` of a message header."""
    ch = _CHANNEL.search(header)
    to = _RECIPIENT.search(header)
    return (ch.group(1) if ch else None), (to.group(1) if to else None)


class HarmonyFamily(Family):
    """GPT-OSS channels."""

    name = "gpt_oss"
    content_with_calls = False
    reasoning_messages = True
    stop_tokens = ("<|return|>", "<|call|>")
    tool_markers = ()

    def to_template_message(self, message: dict[str, Any]) -> dict[str, Any]:
        out = super().to_template_message(message)
        if out.get("role") == "assistant" and out.get("tool_calls") and out.get("content"):
            # the template takes an analysis message in one field only
            out.setdefault("thinking", out["content"])
            out["content"] = ""
        return out

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
            parts.append(f"{CHANNEL}analysis{MESSAGE}{reasoning}{END}")
        for name, args in tool_calls[:1]:  # one call per message; it ends the output
            head = START + "assistant" if parts else ""
            parts.append(
                f"{head} to=functions.{name}{CHANNEL}commentary json{MESSAGE}{json.dumps(args)}"
            )
            return "".join(parts)
        head = START + "assistant" if parts else ""
        parts.append(f"{head}{CHANNEL}final{MESSAGE}{content}")
        return "".join(parts)

    def parse(self, text: str, *, in_reasoning: bool = False) -> ParsedOutput:
        reasoning: list[str] = []
        content: list[str] = []
        calls: list[ToolCall] = []
        ill = False
        for chunk in text.split(START):
            if not chunk.strip():
                continue
            if chunk.startswith("assistant"):
                chunk = chunk[len("assistant") :]
            header, sep, body = chunk.partition(MESSAGE)
            if not sep:
                ill = True
                break
            if body.endswith(END):
                body = body[: -len(END)]
            channel, to = _header(header)
            if to and to.startswith("functions."):
                try:
                    json.loads(body)
                except ValueError:
                    ill = True
                    break
                calls.append(ToolCall(new_call_id(), to[len("functions.") :], body.strip()))
            elif channel == "analysis":
                reasoning.append(body)
            elif channel in ("final", "commentary"):
                content.append(body)
            else:
                ill = True
                break
        if ill:
            return ParsedOutput(content=text, reasoning="".join(reasoning) or None, ill_formed=True)
        return ParsedOutput(
            content="".join(content), reasoning="\n".join(reasoning) or None, tool_calls=calls
        )

    def new_stream_parser(
        self, decoder: IncrementalDecoder, *, in_reasoning: bool
    ) -> StreamingParser:
        return HarmonyStreamParser(self, decoder)


class HarmonyStreamParser:
    """Streams analysis as reasoning and final/commentary as content; holds tool calls.

    The reasoning deltas concatenate to :meth:`HarmonyFamily.parse`'s reasoning (analysis
    messages joined by a newline), the content deltas to its content.
    """

    def __init__(self, family: HarmonyFamily, decoder: IncrementalDecoder) -> None:
        self.family = family
        self.decoder = decoder
        self._buf = ""
        self._pos = 0
        self._kind: Literal["reasoning", "content", "tool"] | None = None  # None: a header
        self._analysis_done = 0  # finished analysis messages
        self._body_started = False  # something of the current body was streamed

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
                channel, to = _header(rest[:i])
                self._kind = "tool" if to else "reasoning" if channel == "analysis" else "content"
                self._pos += i + len(MESSAGE)
                self._body_started = False
                continue
            end = rest.find(END)
            body = rest[:end] if end >= 0 else rest[: len(rest) - partial_suffix(rest, (END,))]
            if self._kind != "tool" and body:
                if self._kind == "reasoning" and self._analysis_done and not self._body_started:
                    out.append(OutputDelta("reasoning", "\n"))
                out.append(OutputDelta(self._kind, body))
                self._body_started = True
            if end < 0:
                if self._kind != "tool":  # a call's arguments are held until finish()
                    self._pos += len(body)
                return out
            self._pos += end + len(END)
            self._analysis_done += self._kind == "reasoning"
            self._kind = None

    def finish(self) -> ParsedOutput:
        """The whole output, parsed from the full text."""
        return self.family.parse(self.decoder.final_text())
