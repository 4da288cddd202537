"""OpenAI Chat Completions requests → neutral turns (:func:`parse_request`; every 400
names its field). :mod:`.openai_chat` writes the responses.

An agent re-sends its whole conversation on every call. :func:`parse_messages` takes the
session's previous neutral messages (``known``) and reuses the leading ones the agent sent
unchanged instead of validating and converting them again, so a turn's parsing cost
follows what is new in it, not the conversation's length.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from rollhub_gateway.protocols.base import (
    RequestedSampling,
    WireError,
    WireRequest,
    function_call,
    new_id,
)
from rollhub_gateway.protocols.fields import (
    json_text,
    opt_bool,
    opt_float,
    opt_int,
    opt_stop,
    opt_str,
    require,
)
from rollhub_gateway.protocols.tool_fields import checked_tool, checked_tool_choice
from rollhub_gateway.turns import ChatTurn

__all__ = ["content_text", "parse_messages", "parse_request", "parse_tools"]

log = logging.getLogger(__name__)


def content_text(
    content: object, where: str, *, media: tuple[str, ...], hint: str, refusal: bool = False
) -> str:
    """Text of an OpenAI content (Chat or Responses): a string or a list of text parts.

    :param media: part types refused with a 400, since the served model reads text only.
    :param hint: what to send instead, ending that 400's message.
    :param refusal: read ``refusal`` parts (an assistant refusal sent back as history) as text.
    """
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise WireError(
            "invalid_request",
            f"{where}.content must be a string or a list of parts",
            param=f"{where}.content",
        )
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("text", "input_text", "output_text"):
            texts.append(str(part.get("text", "")))
        elif refusal and kind == "refusal":
            texts.append(str(part.get("refusal", "")))
        elif kind in media:
            raise WireError(
                "invalid_request",
                f"{where}.content[{j}] is {kind!r}: this gateway serves a text-only model; {hint}",
                param=f"{where}.content",
            )
        else:
            raise WireError(
                "invalid_request",
                f"{where}.content[{j}] has unknown type {kind!r}",
                param=f"{where}.content",
            )
    return "".join(texts)


def _text_of(content: object, where: str) -> str | None:
    """Text of a Chat message content; ``None`` stays ``None``."""
    if content is None:
        return None
    return content_text(
        content,
        where,
        media=("image_url", "input_image", "input_audio", "file"),
        hint="send text parts",
        refusal=True,
    )


def parse_messages(
    messages: object, field: str = "messages", known: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """Validate OpenAI chat messages and return them in neutral form.

    :param known: the neutral messages of the session's previous call. The leading
        messages sent exactly as they read there (an agent re-sends its conversation every
        turn) are taken from it as they are, not parsed again: a message already in
        neutral form parses to itself. An assistant message sent without ``content`` has
        none in neutral form either (it reads as ``None``), so that it compares equal as
        sent.
    """
    if not isinstance(messages, list) or not messages:
        raise WireError(
            "invalid_request", f"{field!r} must be a non-empty array of messages", param=field
        )
    start = 0
    if known:
        n = min(len(known), len(messages))
        # an agent re-sends its conversation every turn: all but the last few messages
        # read exactly as the session holds them (one comparison, in C); the rest are
        # compared one by one
        start = max(n - 2, 0)
        if messages[:start] != known[:start]:
            start = 0
        for raw, k in zip(messages[start:n], known[start:n]):  # noqa: B905 - same length
            if raw != k and not _unchanged(raw, k):
                break
            start += 1
    out: list[dict[str, Any]] = known[:start] if known else []
    for i in range(start, len(messages)):
        m = messages[i]
        where = f"{field}[{i}]"
        if not isinstance(m, dict):
            raise WireError("invalid_request", f"{where} must be an object", param=where)
        sent_role = m.get("role")
        role = _ROLES.get(sent_role) if isinstance(sent_role, str) else None  # one string each
        if role is None:
            raise WireError(
                "invalid_request",
                f"{where}.role={sent_role!r} must be system, developer, user, assistant or tool",
                param=f"{where}.role",
            )
        msg: dict[str, Any] = {"role": role, "content": _text_of(m.get("content"), where)}
        if role == "assistant":
            calls = m.get("tool_calls") or []
            if not isinstance(calls, list):
                raise WireError(
                    "invalid_request",
                    f"{where}.tool_calls must be an array",
                    param=f"{where}.tool_calls",
                )
            if calls:
                msg["tool_calls"] = [
                    _tool_call(c, f"{where}.tool_calls[{j}]") for j, c in enumerate(calls)
                ]
            reasoning = m.get("reasoning_content", m.get("reasoning"))
            if isinstance(reasoning, str) and reasoning:
                msg["reasoning_content"] = reasoning
            if msg["content"] is None and "content" not in m:
                del msg["content"]
        elif role == "tool":
            call_id = m.get("tool_call_id")
            if not isinstance(call_id, str):
                raise WireError(
                    "invalid_request",
                    f"{where}.tool_call_id is required for role 'tool'",
                    param=f"{where}.tool_call_id",
                )
            msg["tool_call_id"] = call_id
            msg["content"] = msg["content"] or ""
        elif msg["content"] is None:
            raise WireError(
                "invalid_request",
                f"{where}.content is required for role {role!r}",
                param=f"{where}.content",
            )
        out.append(msg)
    return out


def _unchanged(raw: object, known: dict[str, Any]) -> bool:
    """Whether ``raw`` is ``known`` as sent (an assistant message may drop its null content)."""
    if raw == known:
        return True
    # the items compared in place (no merged copy of every re-sent assistant message)
    return (
        type(raw) is dict
        and len(raw) + 1 == len(known)
        and "content" not in raw
        and known.get("content", "") is None
        and raw.items() <= known.items()
    )


#: the roles as constants: a session keeps its messages, and each kept its own role string
_ROLES = {r: r for r in ("system", "user", "assistant", "tool")} | {"developer": "system"}


def _tool_call(call: object, where: str) -> dict[str, Any]:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(call, dict) or not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise WireError("invalid_request", f"{where}.function.name is required", param=where)
    return function_call(
        str(call.get("id") or new_id("call_")),
        fn["name"],
        json_text(fn.get("arguments", "{}"), f"{where}.function.arguments"),
    )


def parse_tools(
    tools: object, field: str = "tools", known: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]] | None:
    """Validate OpenAI function tools (neutral form is the same).

    :param known: the session's previous neutral tools, reused when sent unchanged.
    """
    if tools is None:
        return None
    if known is not None and tools == known:
        return known
    if not isinstance(tools, list):
        raise WireError("invalid_request", f"{field!r} must be an array", param=field)
    out = []
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(t, dict) or t.get("type") != "function" or not isinstance(fn, dict):
            raise WireError(
                "invalid_request",
                f"{field}[{i}] must be {{'type': 'function', 'function': {{...}}}}",
                param=f"{field}[{i}]",
            )
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise WireError(
                "invalid_request",
                f"{field}[{i}].function.name is required",
                param=f"{field}[{i}].function.name",
            )
        where = f"{field}[{i}].function"
        out.append(
            checked_tool(
                fn["name"],
                fn.get("parameters"),
                fn.get("description"),
                where=where,
                schema="parameters",
            )
        )
    return out or None


def parse_request(body: Mapping[str, Any], *, known: ChatTurn | None = None) -> WireRequest:
    """Validate a request body; every 400 names its field.

    :param known: the session's previous call; messages and tools it already holds
        are reused instead of parsed again.
    """
    n = opt_int(body, "n")
    if n not in (None, 1):
        raise WireError(
            "invalid_request",
            f"n={n} is not supported: this gateway returns one choice (n=1); send n separate requests",
            param="n",
        )
    if body.get("logit_bias"):  # the engines sample without it: a silently other distribution
        raise WireError(
            "invalid_request",
            "'logit_bias' is not supported: the engine samples from the model's own "
            "distribution, which a trainer's logprobs must match; remove it",
            param="logit_bias",
        )
    messages = parse_messages(
        require(body, "messages", list), known=known.messages if known else None
    )
    max_tokens = opt_int(body, "max_completion_tokens", minimum=1)
    if max_tokens is None:
        max_tokens = opt_int(body, "max_tokens", minimum=1)
    stream = bool(opt_bool(body, "stream"))
    stream_options = body.get("stream_options") or {}
    if not isinstance(stream_options, dict):
        raise WireError(
            "invalid_request", "'stream_options' must be an object", param="stream_options"
        )
    top_logprobs = opt_int(body, "top_logprobs", minimum=0, maximum=20)
    extra_body = body.get("extra_body")
    return_ids = bool(opt_bool(body, "return_token_ids")) or (
        isinstance(extra_body, dict) and extra_body.get("return_token_ids") is True
    )
    tool_choice = body.get("tool_choice")
    if tool_choice is not None and not (
        tool_choice in ("none", "auto", "required") or isinstance(tool_choice, dict)
    ):
        raise WireError(
            "invalid_request",
            "'tool_choice' must be 'none', 'auto', 'required' or a function object",
            param="tool_choice",
        )
    tools = parse_tools(body.get("tools"), known=known.tools if known else None)
    turn = ChatTurn(messages, tools, checked_tool_choice(tool_choice, tools))
    return WireRequest(
        turn=turn,
        sampling=RequestedSampling(
            max_tokens=max_tokens,
            temperature=opt_float(body, "temperature", minimum=0, maximum=2),
            top_p=opt_float(body, "top_p", above=0, maximum=1),
            top_k=opt_int(body, "top_k"),
            seed=opt_int(body, "seed"),
            stop=opt_stop(body, "stop"),
        ),
        stream=stream,
        model=opt_str(body, "model"),
        options={
            "logprobs": bool(opt_bool(body, "logprobs")) or bool(top_logprobs),
            "include_usage": bool(stream_options.get("include_usage")),
            "top_logprobs": top_logprobs or 0,
            "return_token_ids": return_ids,
        },
        known=turn,  # its messages read as sent: the next call compares against them
    )
