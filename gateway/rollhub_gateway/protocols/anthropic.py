"""Anthropic Messages (``POST /v1/messages``, ``/v1/messages/count_tokens``) ⇄ neutral turns.

Supported: ``system`` as a string or text blocks, messages whose content is a string or
blocks (``text``, ``tool_use``, ``tool_result``, ``thinking``), tools with
``input_schema``, ``tool_choice`` (auto, any, tool, none), ``max_tokens``, ``temperature``,
``top_p``, ``top_k``, ``stop_sequences`` and ``stream`` (the documented event sequence).
Images and documents are refused with a 400: the served model reads text only.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

from rollhub_gateway.protocols.base import (
    ProtocolAdapter,
    RequestedSampling,
    TurnResult,
    WireError,
    WireRequest,
    function_call,
    function_tool,
    json_text,
    new_id,
    opt_bool,
    opt_float,
    opt_int,
    opt_stop,
    owed_deltas,
    parse_arguments,
    require,
    sse,
)
from rollhub_gateway.protocols.execution import Finished, Started, StreamEvent
from rollhub_gateway.protocols.known_prefix import KnownPrefix, reusable_prefix
from rollhub_gateway.turns import ChatTurn, OutputDelta

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


def _text_blocks(value: Any, where: str) -> str:
    """Text of a string or a list of text blocks (system prompts, tool results)."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise WireError(
            "invalid_request", f"{where} must be a string or a list of text blocks", param=where
        )
    texts = []
    for j, b in enumerate(value):
        kind = b.get("type") if isinstance(b, dict) else None
        if kind == "text":
            texts.append(str(b.get("text", "")))
        else:
            _refuse(kind, f"{where}[{j}]")
    return "\n".join(texts) if where == "system" else "".join(texts)


def _refuse(kind: Any, where: str) -> None:
    if kind in ("image", "document"):
        raise WireError(
            "invalid_request",
            f"{where} is an {kind!r} block: this gateway serves a text-only model; send text blocks",
            param=where,
        )
    raise WireError("invalid_request", f"{where} has unsupported block type {kind!r}", param=where)


def _messages(
    messages: Any, out: list[dict[str, Any]], ends: list[int | None], start: int = 0
) -> list[dict[str, Any]]:
    """Append the neutral messages of ``messages[start:]`` to ``out`` and each item's end
    to ``ends``."""
    if not isinstance(messages, list) or not messages:
        raise WireError("invalid_request", "'messages' must be a non-empty array", param="messages")
    for i in range(start, len(messages)):
        m = messages[i]
        where = f"messages[{i}]"
        role = m.get("role") if isinstance(m, dict) else None
        if role not in ("user", "assistant"):
            raise WireError(
                "invalid_request",
                f"{where}.role={role!r} must be 'user' or 'assistant'",
                param=f"{where}.role",
            )
        content = m.get("content")
        if isinstance(content, str):
            out.append({"role": role, "content": content})
        elif not isinstance(content, list):
            raise WireError(
                "invalid_request",
                f"{where}.content must be a string or an array of blocks",
                param=f"{where}.content",
            )
        elif role == "assistant":
            out.append(_assistant(content, where))
        else:
            out.extend(_user(content, where))
        ends.append(len(out))
    return out


def _assistant(blocks: list[Any], where: str) -> dict[str, Any]:
    texts, reasoning, calls = [], [], []
    for j, b in enumerate(blocks):
        kind = b.get("type") if isinstance(b, dict) else None
        at = f"{where}.content[{j}]"
        if kind == "text":
            texts.append(str(b.get("text", "")))
        elif kind == "thinking":
            reasoning.append(str(b.get("thinking", "")))
        elif kind == "redacted_thinking":
            continue
        elif kind == "tool_use":
            if not isinstance(b.get("name"), str) or not isinstance(b.get("id"), str):
                raise WireError(
                    "invalid_request", f"{at} (tool_use) needs 'id' and 'name'", param=at
                )
            args = json_text(b.get("input") or {}, f"{at}.input")
            calls.append(function_call(b["id"], b["name"], args))
        else:
            _refuse(kind, at)
    msg: dict[str, Any] = {
        "role": "assistant",
        "content": "".join(texts) if texts or not calls else None,
    }
    if calls:
        msg["tool_calls"] = calls
    if reasoning:
        msg["reasoning_content"] = "".join(reasoning)
    return msg


def _user(blocks: list[Any], where: str) -> list[dict[str, Any]]:
    """A user turn: tool results become tool messages, text stays a user message, in order."""
    out: list[dict[str, Any]] = []
    texts: list[str] = []
    for j, b in enumerate(blocks):
        kind = b.get("type") if isinstance(b, dict) else None
        at = f"{where}.content[{j}]"
        if kind == "text":
            texts.append(str(b.get("text", "")))
        elif kind == "tool_result":
            if texts:
                out.append({"role": "user", "content": "".join(texts)})
                texts = []
            if not isinstance(b.get("tool_use_id"), str):
                raise WireError(
                    "invalid_request", f"{at}.tool_use_id is required", param=f"{at}.tool_use_id"
                )
            content = b.get("content")
            text = "" if content is None else _text_blocks(content, f"{at}.content")
            out.append({"role": "tool", "tool_call_id": b["tool_use_id"], "content": text})
        else:
            _refuse(kind, at)
    if texts or not out:
        out.append({"role": "user", "content": "".join(texts)})
    return out


def _tools(tools: Any) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise WireError("invalid_request", "'tools' must be an array", param="tools")
    out = []
    for i, t in enumerate(tools):
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            raise WireError(
                "invalid_request", f"tools[{i}].name is required", param=f"tools[{i}].name"
            )
        if t.get("type") not in (None, "custom"):
            raise WireError(
                "invalid_request",
                f"tools[{i}] is a server tool ({t.get('type')!r}); only custom tools are supported",
                param=f"tools[{i}].type",
            )
        out.append(function_tool(t["name"], t.get("input_schema"), t.get("description")))
    return out or None


def _tool_choice(choice: Any) -> Any:
    if choice is None:
        return None
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind == "auto":
        return "auto"
    if kind == "any":
        return "required"
    if kind == "none":
        return "none"
    if kind == "tool" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise WireError(
        "invalid_request",
        "'tool_choice' must be {type: auto|any|none} or {type: tool, name}",
        param="tool_choice",
    )


class AnthropicMessages(ProtocolAdapter):
    """The Anthropic Messages wire format."""

    name = "anthropic"

    #: :meth:`parse` takes what it kept of the session's previous call (``known=``)
    reuses_known = True

    def parse(
        self,
        body: Mapping[str, Any],
        *,
        count_only: bool = False,
        known: KnownPrefix | None = None,
    ) -> WireRequest:
        """Validate a request body; every 400 names its field.

        :param known: the :class:`KnownPrefix` of the session's previous call: the leading
            messages sent exactly as then are not parsed again.
        """
        max_tokens = None if count_only else require(body, "max_tokens", int)
        if max_tokens is not None and max_tokens < 1:
            raise WireError("invalid_request", "'max_tokens' must be >= 1", param="max_tokens")
        items, system = body.get("messages"), body.get("system")
        start, messages, ends = reusable_prefix(items, system, known)
        if not start:
            if system is not None:
                messages = [{"role": "system", "content": _text_blocks(system, "system")}]
            ends = [len(messages)]
        _messages(items, messages, ends, start)
        turn = ChatTurn(messages, _tools(body.get("tools")), _tool_choice(body.get("tool_choice")))
        return WireRequest(
            turn=turn,
            sampling=RequestedSampling(
                max_tokens=max_tokens,
                temperature=opt_float(body, "temperature", minimum=0, maximum=1),
                top_p=opt_float(body, "top_p", minimum=0, maximum=1),
                top_k=opt_int(body, "top_k", minimum=1),
                stop=opt_stop(body, "stop_sequences"),
            ),
            stream=bool(opt_bool(body, "stream")),
            model=body.get("model"),
            known=None if count_only else KnownPrefix(system, items, ends, turn),
        )

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
    ) -> AsyncIterator[bytes]:
        """message_start, content blocks (start/delta/stop), message_delta, message_stop."""
        streamed = {"content": "", "reasoning": ""}
        block = {"index": -1, "kind": None}

        def open_block(kind: str) -> list[bytes]:
            out = close_block()
            block["index"] += 1
            block["kind"] = kind
            start = (
                {"type": "thinking", "thinking": "", "signature": ""}
                if kind == "reasoning"
                else {"type": "text", "text": ""}
            )
            out.append(
                sse(
                    {
                        "type": "content_block_start",
                        "index": block["index"],
                        "content_block": start,
                    },
                    "content_block_start",
                )
            )
            return out

        def close_block() -> list[bytes]:
            if block["kind"] is None:
                return []
            block["kind"] = None
            return [
                sse({"type": "content_block_stop", "index": block["index"]}, "content_block_stop")
            ]

        def text(kind: str, piece: str) -> list[bytes]:
            out = open_block(kind) if block["kind"] != kind else []
            streamed[kind] += piece
            delta = (
                {"type": "thinking_delta", "thinking": piece}
                if kind == "reasoning"
                else {"type": "text_delta", "text": piece}
            )
            out.append(
                sse(
                    {"type": "content_block_delta", "index": block["index"], "delta": delta},
                    "content_block_delta",
                )
            )
            return out

        async for ev in events:
            if isinstance(ev, Started):
                msg = {
                    "id": new_id("msg_"), "type": "message", "role": "assistant", "model": ev.model_id,
                    "content": [], "stop_reason": None, "stop_sequence": None,
                    "usage": {"input_tokens": ev.prompt_tokens, "output_tokens": 0},
                }  # fmt: skip
                yield sse({"type": "message_start", "message": msg}, "message_start")
            elif isinstance(ev, OutputDelta):
                if ev.text:
                    for b in text(ev.kind, ev.text):
                        yield b
            elif isinstance(ev, Finished):
                r = ev.result
                chunks: list[bytes] = []
                for d in owed_deltas(streamed, r.parsed):
                    chunks += text(d.kind, d.text)
                if block["index"] < 0 and not r.parsed.tool_calls:
                    chunks += open_block("content")  # an empty answer is still one text block
                chunks += close_block()
                for c in r.parsed.tool_calls:
                    block["index"] += 1
                    i = block["index"]
                    chunks.append(
                        sse(
                            {
                                "type": "content_block_start",
                                "index": i,
                                "content_block": {
                                    "type": "tool_use",
                                    "id": c.id,
                                    "name": c.name,
                                    "input": {},
                                },
                            },
                            "content_block_start",
                        )
                    )
                    chunks.append(
                        sse(
                            {
                                "type": "content_block_delta",
                                "index": i,
                                "delta": {
                                    "type": "input_json_delta",
                                    "partial_json": json.dumps(
                                        parse_arguments(c.arguments), ensure_ascii=False
                                    ),
                                },
                            },
                            "content_block_delta",
                        )
                    )
                    chunks.append(
                        sse({"type": "content_block_stop", "index": i}, "content_block_stop")
                    )
                delta = {
                    "stop_reason": _stop_reason(r),
                    "stop_sequence": r.stop_sequence,
                }
                chunks.append(
                    sse(
                        {
                            "type": "message_delta",
                            "delta": delta,
                            "usage": {"output_tokens": r.completion_tokens},
                        },
                        "message_delta",
                    )
                )
                chunks.append(sse({"type": "message_stop"}, "message_stop"))
                for b in chunks:
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
