"""Anthropic Messages (``POST /v1/messages``, ``/v1/messages/count_tokens``) ⇄ neutral turns.

Supported: ``system`` as a string or text blocks, messages whose content is a string or
blocks (``text``, ``tool_use``, ``tool_result``, ``thinking``), tools with
``input_schema``, ``tool_choice`` (auto, any, tool, none), ``max_tokens``, ``temperature``,
``top_p``, ``top_k``, ``stop_sequences`` and ``stream`` (the documented event sequence).
Images and documents are refused with a 400: the served model reads text only.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from rollhub_gateway.protocols.anthropic_input import parse_request
from rollhub_gateway.protocols.base import (
    Finished,
    ProtocolAdapter,
    Started,
    StreamEvent,
    TurnResult,
    WireError,
    WireRequest,
    new_id,
    parse_arguments,
    sse,
)
from rollhub_gateway.protocols.text_blocks import TextBlocks, TextKind
from rollhub_gateway.turns import OutputDelta

__all__ = ["AnthropicMessages"]

_ERROR_TYPES = {
    "invalid_request": "invalid_request_error",
    "authentication": "authentication_error",
    "permission": "permission_error",
    "not_found": "not_found_error",
    "gone": "invalid_request_error",
    "too_large": "request_too_large",
    "rate_limit": "rate_limit_error",
    "engine": "api_error",
    "overloaded": "overloaded_error",
    "internal": "api_error",
}
_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "abort": "end_turn"}


class AnthropicMessages(ProtocolAdapter):
    """The Anthropic Messages wire format."""

    name = "anthropic"

    #: :meth:`parse` takes what it kept of the session's previous call (``known=``)
    reuses_known = True
    parse = staticmethod(parse_request)

    def response(self, req: WireRequest, result: TurnResult) -> dict[str, Any]:
        """The ``message`` object."""
        p = result.parsed
        content: list[dict[str, Any]] = []
        if p.reasoning:
            content.append({"type": "thinking", "thinking": p.reasoning, "signature": ""})
        if p.content or not p.tool_calls:
            content.append({"type": "text", "text": p.content})
        for c in p.tool_calls:
            content.append(
                {
                    "type": "tool_use",
                    "id": c.id,
                    "name": c.name,
                    "input": parse_arguments(c.arguments),
                }
            )
        return {
            "id": new_id("msg_"),
            "type": "message",
            "role": "assistant",
            "model": result.model_id,
            "content": content,
            "stop_reason": _stop_reason(result),
            "stop_sequence": result.stop_sequence,
            "usage": {
                "input_tokens": result.prompt_tokens,
                "output_tokens": result.completion_tokens,
            },
        }

    async def stream(
        self, req: WireRequest, events: AsyncIterator[StreamEvent]
    ) -> AsyncGenerator[bytes, None]:
        """message_start, content blocks (start/delta/stop), message_delta, message_stop."""
        blocks = TextBlocks(_Blocks())
        async for ev in events:
            if isinstance(ev, Started):
                msg: dict[str, Any] = {
                    "id": new_id("msg_"), "type": "message", "role": "assistant", "model": ev.model_id,
                    "content": [], "stop_reason": None, "stop_sequence": None,
                    "usage": {"input_tokens": ev.prompt_tokens, "output_tokens": 0},
                }  # fmt: skip
                yield sse({"type": "message_start", "message": msg}, "message_start")
            elif isinstance(ev, OutputDelta):
                if ev.text:
                    for b in blocks.write(ev.kind, ev.text):
                        yield b
            elif isinstance(ev, Finished):
                for b in _finish(blocks, ev.result):
                    yield b

    def error_body(self, err: WireError) -> dict[str, Any]:
        """``{"type": "error", "error": {type, message}}``."""
        return {"type": "error", "error": {"type": _ERROR_TYPES[err.kind], "message": err.message}}

    def stream_error(self, err: WireError) -> bytes:
        """An ``error`` event after the stream began."""
        return sse(self.error_body(err), "error")


def _stop_reason(r: TurnResult) -> str:
    if r.stop_sequence is not None and not r.parsed.tool_calls:
        return "stop_sequence"
    return _STOP.get(r.finish_reason, "end_turn")


class _Blocks:
    """Anthropic content blocks of text and thinking (see :class:`.TextBlocks`)."""

    def open(self, kind: TextKind, index: int) -> list[bytes]:
        start = (
            {"type": "thinking", "thinking": "", "signature": ""}
            if kind == "reasoning"
            else {"type": "text", "text": ""}
        )
        event = {"type": "content_block_start", "index": index, "content_block": start}
        return [sse(event, "content_block_start")]

    def delta(self, kind: TextKind, index: int, piece: str) -> list[bytes]:
        delta = (
            {"type": "thinking_delta", "thinking": piece}
            if kind == "reasoning"
            else {"type": "text_delta", "text": piece}
        )
        event = {"type": "content_block_delta", "index": index, "delta": delta}
        return [sse(event, "content_block_delta")]

    def close(self, kind: TextKind, index: int, text: str) -> list[bytes]:
        return [sse({"type": "content_block_stop", "index": index}, "content_block_stop")]


def _finish(blocks: TextBlocks, r: TurnResult) -> list[bytes]:
    """What is owed of the text, one tool_use block per call, message_delta, message_stop."""
    out = blocks.finish(r.parsed)
    if blocks.count == 0 and not r.parsed.tool_calls:
        out += blocks.open("content") + blocks.close()  # an empty answer is still one block
    for i, c in enumerate(r.parsed.tool_calls, start=blocks.count):
        use = {"type": "tool_use", "id": c.id, "name": c.name, "input": {}}
        args = json.dumps(parse_arguments(c.arguments), ensure_ascii=False)
        out += [
            sse({"type": "content_block_start", "index": i, "content_block": use}, "content_block_start"),
            sse(
                {"type": "content_block_delta", "index": i,
                 "delta": {"type": "input_json_delta", "partial_json": args}},
                "content_block_delta",
            ),
            sse({"type": "content_block_stop", "index": i}, "content_block_stop"),
        ]  # fmt: skip
    delta = {"stop_reason": _stop_reason(r), "stop_sequence": r.stop_sequence}
    usage = {"output_tokens": r.completion_tokens}
    out.append(sse({"type": "message_delta", "delta": delta, "usage": usage}, "message_delta"))
    out.append(sse({"type": "message_stop"}, "message_stop"))
    return out
