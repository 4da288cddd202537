"""OpenAI Responses (``POST /v1/responses``) ⇄ neutral turns.

Supported: ``input`` as a string or a list of items (messages with text parts,
``function_call``, ``function_call_output``, ``reasoning``), ``instructions``, function
tools and ``tool_choice``, ``max_output_tokens``, ``temperature``, ``top_p``, and ``stream``
(the documented ``response.*`` event sequence). The gateway keeps no server-side response
state: ``previous_response_id`` is refused; send the whole conversation as ``input``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from rollhub_gateway.protocols.base import (
    Finished,
    ProtocolAdapter,
    Started,
    StreamEvent,
    TurnResult,
    WireError,
    WireRequest,
    new_id,
    sse,
)
from rollhub_gateway.protocols.openai_chat import OpenAIChat
from rollhub_gateway.protocols.openai_responses_input import parse_request
from rollhub_gateway.protocols.text_blocks import TextBlocks, TextKind
from rollhub_gateway.turns import OutputDelta

__all__ = ["OpenAIResponses"]


class OpenAIResponses(ProtocolAdapter):
    """The Responses wire format (stateless)."""

    name = "openai_responses"

    #: :meth:`parse` takes what it kept of the session's previous call (``known=``)
    reuses_known = True
    parse = staticmethod(parse_request)

    def _envelope(
        self, req: WireRequest, rid: str, created: int, model: str, status: str
    ) -> dict[str, Any]:
        echo = req.options.get("body", {})
        return {
            "id": rid, "object": "response", "created_at": created, "status": status, "model": model,
            "output": [], "error": None, "incomplete_details": None,
            "instructions": echo.get("instructions"), "tools": echo.get("tools") or [],
            "tool_choice": echo.get("tool_choice") or "auto", "parallel_tool_calls": True,
            "temperature": echo.get("temperature"), "top_p": echo.get("top_p"),
            "max_output_tokens": echo.get("max_output_tokens"), "metadata": echo.get("metadata") or {},
            "text": {"format": {"type": "text"}}, "usage": None,
        }  # fmt: skip

    def response(
        self, req: WireRequest, result: TurnResult, rid: str | None = None
    ) -> dict[str, Any]:
        """The ``response`` object."""
        incomplete = result.finish_reason == "length"
        env = self._envelope(
            req,
            rid or new_id("resp_"),
            result.created,
            result.model_id,
            "incomplete" if incomplete else "completed",
        )
        if incomplete:
            env["incomplete_details"] = {"reason": "max_output_tokens"}
        p = result.parsed
        if p.reasoning:
            env["output"].append(_reasoning_item(new_id("rs_"), p.reasoning))
        if p.content or not p.tool_calls:
            env["output"].append(_message_item(new_id("msg_"), p.content))
        env["output"] += [
            _call_item(new_id("fc_"), c.id, c.name, c.arguments) for c in p.tool_calls
        ]
        env["usage"] = {
            "input_tokens": result.prompt_tokens, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": result.completion_tokens, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": result.prompt_tokens + result.completion_tokens,
        }  # fmt: skip
        return env

    async def stream(
        self, req: WireRequest, events: AsyncIterator[StreamEvent]
    ) -> AsyncGenerator[bytes, None]:
        """response.created … output items and their deltas … response.completed."""
        rid = new_id("resp_")
        ev = _Sequence()
        items = _Items(ev)
        blocks = TextBlocks(items)
        async for e in events:
            if isinstance(e, Started):
                env = self._envelope(req, rid, int(time.time()), e.model_id, "in_progress")
                yield ev("response.created", response=env)
                yield ev("response.in_progress", response=env)
            elif isinstance(e, OutputDelta):
                if e.text:
                    for b in blocks.write(e.kind, e.text):
                        yield b
            elif isinstance(e, Finished):
                r = e.result
                chunks = blocks.finish(r.parsed)
                for c in r.parsed.tool_calls:
                    chunks += items.call(c.id, c.name, c.arguments)
                final_env = self.response(req, r, rid)
                final_env["output"] = items.done if items.done else final_env["output"]
                # always the terminal event SDK stream helpers wait for; the response's
                # status says "incomplete" when max_output_tokens cut it short
                chunks.append(ev("response.completed", response=final_env))
                for b in chunks:
                    yield b

    def error_body(self, err: WireError) -> dict[str, Any]:
        """Same error shape as Chat Completions."""
        return OpenAIChat().error_body(err)

    def stream_error(self, err: WireError) -> bytes:
        """An ``error`` event then ``response.failed``, after the stream began."""
        body = self.error_body(err)["error"]
        error = {"code": body["code"], "message": body["message"]}
        failed = {
            "id": new_id("resp_"), "object": "response", "created_at": int(time.time()),
            "status": "failed", "error": error, "output": [], "model": "", "incomplete_details": None,
        }  # fmt: skip
        return sse(
            {"type": "error", **error, "param": body["param"], "sequence_number": 0}, "error"
        ) + sse(
            {"type": "response.failed", "response": failed, "sequence_number": 1}, "response.failed"
        )


def _message_item(mid: str, text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": mid,
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def _reasoning_item(rid: str, text: str) -> dict[str, Any]:
    return {
        "type": "reasoning",
        "id": rid,
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
    }


def _call_item(
    fid: str, call_id: str, name: str, arguments: str, status: str = "completed"
) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": fid,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


class _Sequence:
    """Writes a stream's events, numbered in order (``sequence_number``)."""

    def __init__(self) -> None:
        self.seq = 0

    def __call__(self, kind: str, **data: object) -> bytes:
        self.seq += 1
        return sse({"type": kind, "sequence_number": self.seq - 1, **data}, kind)


class _Items:
    """Responses output items: message and reasoning items as text blocks (see
    :class:`.TextBlocks`), then function calls; :attr:`done` holds the finished items."""

    def __init__(self, ev: _Sequence) -> None:
        self.ev = ev
        self.done: list[dict[str, Any]] = []
        self._id = ""

    def open(self, kind: TextKind, index: int) -> list[bytes]:
        if kind == "content":
            self._id = new_id("msg_")
            item: dict[str, Any] = {
                "type": "message", "id": self._id, "status": "in_progress", "role": "assistant",
                "content": [],
            }  # fmt: skip
        else:
            self._id = new_id("rs_")
            item = {"type": "reasoning", "id": self._id, "summary": [], "content": []}
        out = [self.ev("response.output_item.added", output_index=index, item=item)]
        if kind == "content":
            part = {"type": "output_text", "text": "", "annotations": []}
            out.append(self._part("response.content_part.added", index, part=part))
        return out

    def delta(self, kind: TextKind, index: int, piece: str) -> list[bytes]:
        if kind == "content":
            return [self._part("response.output_text.delta", index, delta=piece, logprobs=[])]
        return [self._part("response.reasoning_text.delta", index, delta=piece)]

    def close(self, kind: TextKind, index: int, text: str) -> list[bytes]:
        if kind == "content":
            part = {"type": "output_text", "text": text, "annotations": []}
            out = [
                self._part("response.output_text.done", index, text=text, logprobs=[]),
                self._part("response.content_part.done", index, part=part),
            ]
            done = _message_item(self._id, text)
        else:
            out = [self._part("response.reasoning_text.done", index, text=text)]
            done = _reasoning_item(self._id, text)
        self.done.append(done)
        out.append(self.ev("response.output_item.done", output_index=index, item=done))
        return out

    def call(self, call_id: str, name: str, arguments: str) -> list[bytes]:
        """A function call item, added, its arguments, done."""
        idx, fid = len(self.done), new_id("fc_")
        added = _call_item(fid, call_id, name, "", status="in_progress")
        done = _call_item(fid, call_id, name, arguments)
        self.done.append(done)
        ev = self.ev
        return [
            ev("response.output_item.added", output_index=idx, item=added),
            ev("response.function_call_arguments.delta", item_id=fid, output_index=idx,
               delta=arguments),
            ev("response.function_call_arguments.done", item_id=fid, output_index=idx,
               arguments=arguments, name=name),
            ev("response.output_item.done", output_index=idx, item=done),
        ]  # fmt: skip

    def _part(self, kind: str, index: int, **data: object) -> bytes:
        return self.ev(kind, item_id=self._id, output_index=index, content_index=0, **data)
