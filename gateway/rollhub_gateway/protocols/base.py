"""What every wire protocol shares: request errors, requested sampling, finished turns.

A protocol module turns its wire request into a :class:`WireRequest` (a neutral
:class:`~rollhub_gateway.turns.ChatTurn` plus the agent's sampling fields), and a
:class:`TurnResult` back into its wire response, stream events or error body.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from aiohttp import web
from rollhub.sampling import Generation

from rollhub_gateway.turns import ChatTurn, OutputDelta, ParsedOutput
from rollhub_gateway.unique_ids import unique_id

try:  # a C JSON codec: request bodies and responses grow with the conversation
    import orjson
except ImportError:  # pragma: no cover - the standard library gives the same results
    orjson = None  # type: ignore[assignment]  # optional: json serves without it

__all__ = [
    "ErrorKind",
    "Finished",
    "RequestedSampling",
    "Started",
    "StreamEvent",
    "TurnResult",
    "WireError",
    "WireRequest",
    "error_response",
    "fast_json_response",
    "function_call",
    "function_tool",
    "new_id",
    "owed_deltas",
]

#: error kind -> HTTP status
ErrorKind = str
STATUS: dict[ErrorKind, int] = {
    "invalid_request": 400,
    "authentication": 401,
    "permission": 403,
    "not_found": 404,
    "gone": 410,
    "too_large": 413,
    "rate_limit": 429,
    "engine": 502,
    "overloaded": 503,
    "internal": 500,
}


class WireError(Exception):
    """A request that fails with an HTTP status; each protocol renders its own body.

    :param kind: one of :data:`STATUS`'s keys.
    :param param: the request field at fault (named in the body where the format allows).
    """

    def __init__(self, kind: ErrorKind, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        if kind not in STATUS:
            raise ValueError(f"unknown error kind {kind!r}")
        self.kind = kind
        self.message = message
        self.param = param

    @property
    def status(self) -> int:
        """The HTTP status of this error."""
        return STATUS[self.kind]


@dataclass(frozen=True)
class RequestedSampling:
    """The sampling fields the agent sent (None: not sent)."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    stop: tuple[str, ...] | None = None


@dataclass(frozen=True)
class WireRequest:
    """One parsed model call."""

    turn: ChatTurn
    sampling: RequestedSampling
    stream: bool = False
    model: str | None = None
    #: protocol-specific extras (OpenAI logprobs, include_usage…)
    options: Mapping[str, Any] = field(default_factory=dict)
    #: what the adapter keeps of this call to parse the session's next one (its ``known=``)
    known: Any = None


@dataclass(frozen=True)
class TurnResult:
    """A sampled, parsed and committed turn, ready to be rendered for the caller."""

    parsed: ParsedOutput
    generation: Generation
    prompt_tokens: int
    model_id: str
    turn_index: int
    #: number of sampled tokens
    completion_tokens: int
    #: neutral finish reason: ``tool_calls``, ``stop``, ``length`` or ``abort``
    finish_reason: str
    #: decoded text of each sampled token (for OpenAI logprobs), when the tokenizer is known
    token_texts: list[str] | None = None
    #: per sampled token, the engine's most likely alternatives ``(text, logprob)``, best
    #: first; None when not asked for or the engine cannot report them
    top_logprobs: list[list[tuple[str, float]]] | None = None
    #: the prompt's token ids exactly as the engine received them
    prompt_ids: list[int] = field(default_factory=list)
    #: the request's stop sequence that ended the output (cut from ``parsed.content``)
    stop_sequence: str | None = None
    created: int = field(default_factory=lambda: int(time.time()))


@dataclass(frozen=True)
class Started:
    """A streamed turn has begun: prompt size and turn index are known."""

    prompt_tokens: int
    turn_index: int
    model_id: str
    #: the prompt's token ids as the engine received them
    prompt_ids: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Finished:
    """A streamed turn is committed; the result is final."""

    result: TurnResult


#: what a streamed turn yields: Started, then text deltas as they become safe, then Finished
StreamEvent = Started | OutputDelta | Finished


class ProtocolAdapter:
    """Base of the three wire formats. Subclasses implement every method."""

    name: ClassVar[str]
    #: whether ``parse`` takes ``known=``: the ``WireRequest.known`` of the session's last
    #: call on this route, so that re-sent messages are not parsed again
    reuses_known: ClassVar[bool] = False

    def error_body(self, err: WireError) -> dict[str, Any]:  # pragma: no cover - abstract
        """The JSON error body of this format."""
        raise NotImplementedError


def new_id(prefix: str) -> str:
    """A unique id with a format prefix (``chatcmpl-``, ``msg_``, ``call_``…)."""
    return unique_id(prefix)


# Server-sent events --------------------------------------------------------------------------


def sse(data: object, event: str | None = None) -> bytes:
    """One server-sent event; ``data`` is JSON-encoded unless it is already text."""
    payload = (
        data
        if isinstance(data, str)
        else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    )
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


def remainder(streamed: str, final: str) -> str:
    """The part of ``final`` not yet streamed (empty when the stream diverged from it).

    A streaming parser may hold back text that could have been the start of tool-call
    markup; once the output is finished that text is known and still owed to the caller.
    """
    return final[len(streamed) :] if final.startswith(streamed) else ""


def owed_deltas(streamed: Mapping[str, str], parsed: ParsedOutput) -> list[OutputDelta]:
    """The reasoning, then content, of the final parse still owed after ``streamed``.

    ``streamed`` maps ``"reasoning"`` and ``"content"`` to the text already sent of each;
    only non-empty remainders (see :func:`remainder`) are returned.
    """
    owed = []
    finals: tuple[tuple[Literal["reasoning", "content"], str], ...] = (
        ("reasoning", parsed.reasoning or ""), ("content", parsed.content)
    )
    for kind, final in finals:
        rest = remainder(streamed[kind], final)
        if rest:
            owed.append(OutputDelta(kind, rest))
    return owed


# Neutral tools and tool calls (the OpenAI function form) ------------------------------------


def function_tool(name: str, parameters: object, description: object) -> dict[str, Any]:
    """A tool in neutral form; a missing schema means an object with no properties."""
    fn = {"name": name, "parameters": parameters or {"type": "object", "properties": {}}}
    if description:
        fn["description"] = description
    return {"type": "function", "function": fn}


def function_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    """A tool call in neutral form; ``arguments`` is JSON text."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def parse_arguments(arguments: str) -> dict[str, Any]:
    """Tool-call arguments as an object (formats that carry objects, not JSON text)."""
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {"value": value}


# Responses ---------------------------------------------------------------------------------


def fast_json_response(data: object, *, status: int = 200) -> web.Response:
    """``web.json_response`` with a C encoder (the same JSON value; UTF-8, not escaped)."""
    if orjson is not None:
        try:
            body = orjson.dumps(data)
        except (TypeError, orjson.JSONEncodeError):
            pass  # e.g. a lone surrogate in a decoded text: json escapes it
        else:
            return web.Response(body=body, status=status, content_type="application/json")
    return web.json_response(data, status=status)


def error_response(adapter: ProtocolAdapter, err: WireError) -> web.Response:
    """``err`` as a JSON response in ``adapter``'s format (429/503 carry Retry-After)."""
    headers = {"Retry-After": "1"} if err.status in (429, 503) else None
    return web.json_response(adapter.error_body(err), status=err.status, headers=headers)
