"""OpenAI Chat Completions (``POST /v1/chat/completions``) ⇄ neutral turns.

Supported: messages of every role (text parts; images are refused), function tools and
``tool_choice``, ``n=1``, ``max_tokens``/``max_completion_tokens``, ``temperature``,
``top_p``, ``stop``, ``seed``, ``logprobs``/``top_logprobs`` (0-20; the sampled tokens'
logprobs, and the alternatives where the engine reports them, else empty lists), ``stream``
with ``stream_options.include_usage``, and vLLM's ``return_token_ids`` (at the root or in
``extra_body``): the prompt's ids as root ``prompt_token_ids`` and the sampled ids as the
choice's ``token_ids`` (streamed: ``prompt_token_ids`` in the first chunk, ``token_ids`` with
the logprobs in the final chunk), so an engine-facing proxy can use this gateway as its
engine.
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
    function_call,
    new_id,
    owed_deltas,
    sse,
)
from rollhub_gateway.protocols.openai_chat_input import parse_request
from rollhub_gateway.turns import OutputDelta

__all__ = ["OpenAIChat"]

_ERROR_TYPES = {
    "invalid_request": ("invalid_request_error", None),
    "authentication": ("authentication_error", "invalid_api_key"),
    "permission": ("permission_error", None),
    "not_found": ("not_found_error", None),
    "gone": ("invalid_request_error", "session_unrecoverable"),
    "too_large": ("invalid_request_error", "request_too_large"),
    "rate_limit": ("rate_limit_error", "rate_limit_exceeded"),
    "engine": ("server_error", "engine_error"),
    "overloaded": ("server_error", "overloaded"),
    "internal": ("server_error", None),
}
_FINISH = {"abort": "stop", "error": "stop"}


class OpenAIChat(ProtocolAdapter):
    """The Chat Completions wire format."""

    name = "openai_chat"

    #: :meth:`parse` takes the session's previous turn (``known=``)
    reuses_known = True
    parse = staticmethod(parse_request)

    # Responses ----------------------------------------------------------------------------

    def response(self, req: WireRequest, result: TurnResult) -> dict[str, Any]:
        """The ``chat.completion`` object."""
        p = result.parsed
        message: dict[str, Any] = {
            "role": "assistant",
            "content": p.content if (p.content or not p.tool_calls) else None,
        }
        if p.tool_calls:
            message["tool_calls"] = [function_call(c.id, c.name, c.arguments) for c in p.tool_calls]
        if p.reasoning:
            message["reasoning_content"] = p.reasoning
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "finish_reason": _FINISH.get(result.finish_reason, result.finish_reason),
            "logprobs": _logprobs(result) if req.options.get("logprobs") else None,
        }
        out: dict[str, Any] = {
            "id": new_id("chatcmpl-"),
            "object": "chat.completion",
            "created": result.created,
            "model": result.model_id,
            "choices": [choice],
            "usage": _usage(result),
        }
        if req.options.get("return_token_ids"):
            out["prompt_token_ids"] = list(result.prompt_ids)
            choice["token_ids"] = list(result.generation.token_ids)
        return out

    async def stream(
        self, req: WireRequest, events: AsyncIterator[StreamEvent]
    ) -> AsyncGenerator[bytes, None]:
        """``chat.completion.chunk`` events, then ``[DONE]``."""
        cid, created = new_id("chatcmpl-"), 0
        include_usage = req.options.get("include_usage")
        return_ids = req.options.get("return_token_ids")
        model = ""
        streamed = {"content": "", "reasoning": ""}

        def chunk(
            delta: dict[str, Any],
            finish: str | None = None,
            root: dict[str, Any] | None = None,
            /,
            **extra: object,  # fields of the choice (positional-only above: no name clashes)
        ) -> bytes:
            body = {
                "id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish, **extra}],
                **(root or {}),
            }  # fmt: skip
            if include_usage:
                body["usage"] = None
            return sse(body)

        def text(d: OutputDelta) -> bytes:
            streamed[d.kind] += d.text
            return chunk({"reasoning_content" if d.kind == "reasoning" else "content": d.text})

        async for ev in events:
            if isinstance(ev, Started):
                created, model = int(time.time()), ev.model_id
                root = {"prompt_token_ids": list(ev.prompt_ids)} if return_ids else None
                yield chunk({"role": "assistant", "content": ""}, None, root)
            elif isinstance(ev, OutputDelta):
                if ev.text:
                    yield text(ev)
            elif isinstance(ev, Finished):
                r = ev.result
                model = r.model_id
                for d in owed_deltas(streamed, r.parsed):
                    yield text(d)
                for i, c in enumerate(r.parsed.tool_calls):
                    yield chunk(
                        {"tool_calls": [{"index": i, **function_call(c.id, c.name, c.arguments)}]}
                    )
                lp = _logprobs(r) if req.options.get("logprobs") else None
                ids = {"token_ids": list(r.generation.token_ids)} if return_ids else {}
                yield chunk({}, _FINISH.get(r.finish_reason, r.finish_reason), logprobs=lp, **ids)
                if include_usage:
                    yield sse(
                        {
                            "id": cid,
                            "object": "chat.completion.chunk",
                            "created": created,
                            "model": model,
                            "choices": [],
                            "usage": _usage(r),
                        }
                    )
                yield sse("[DONE]")

    # Errors -------------------------------------------------------------------------------

    def error_body(self, err: WireError) -> dict[str, Any]:
        """``{"error": {message, type, param, code}}``."""
        etype, code = _ERROR_TYPES[err.kind]
        return {"error": {"message": err.message, "type": etype, "param": err.param, "code": code}}

    def stream_error(self, err: WireError) -> bytes:
        """An error after the stream began: an ``error`` data event."""
        return sse(self.error_body(err))


def _usage(r: TurnResult) -> dict[str, int]:
    return {
        "prompt_tokens": r.prompt_tokens,
        "completion_tokens": r.completion_tokens,
        "total_tokens": r.prompt_tokens + r.completion_tokens,
    }


def _logprobs(r: TurnResult) -> dict[str, Any]:
    texts = r.token_texts or [""] * len(r.generation.token_ids)
    tops = r.top_logprobs or [[]] * len(texts)
    return {
        "content": [
            {
                "token": t,
                "logprob": lp,
                "bytes": list(t.encode("utf-8")),
                "top_logprobs": [
                    {"token": a, "logprob": alp, "bytes": list(a.encode("utf-8"))} for a, alp in top
                ],
                "token_id": tid,
            }
            for t, lp, tid, top in zip(
                texts, r.generation.logprobs, r.generation.token_ids, tops, strict=False
            )
        ],
        "refusal": None,
    }
