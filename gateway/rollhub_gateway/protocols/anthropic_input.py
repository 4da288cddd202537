"""Anthropic Messages requests (``POST /v1/messages``, ``count_tokens``) → neutral turns.

Every 400 names its field. :mod:`.anthropic` writes the responses.
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
from rollhub_gateway.protocols.known_prefix import KnownPrefix, reusable_prefix
from rollhub_gateway.protocols.tool_fields import checked_tool, checked_tool_choice
from rollhub_gateway.turns import ChatTurn, ToolChoice

__all__ = ["parse_request"]

log = logging.getLogger(__name__)


def _text_blocks(value: object, where: str) -> str:
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


def _refuse(kind: object, where: str) -> None:
    if kind in ("image", "document"):
        raise WireError(
            "invalid_request",
            f"{where} is an {kind!r} block: this gateway serves a text-only model; send text blocks",
            param=where,
        )
    raise WireError("invalid_request", f"{where} has unsupported block type {kind!r}", param=where)


def _messages(
    messages: object, out: list[dict[str, Any]], ends: list[int | None], start: int = 0
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


def _tools(tools: object) -> list[dict[str, Any]] | None:
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
        out.append(
            checked_tool(
                t["name"],
                t.get("input_schema"),
                t.get("description"),
                where=f"tools[{i}]",
                schema="input_schema",
            )
        )
    return out or None


def _tool_choice(choice: object) -> ToolChoice:
    if choice is None:
        return None
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind == "auto":
        return "auto"
    if kind == "any":
        return "required"
    if kind == "none":
        return "none"
    if kind == "tool" and isinstance(choice, dict) and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise WireError(
        "invalid_request",
        "'tool_choice' must be {type: auto|any|none} or {type: tool, name}",
        param="tool_choice",
    )


def parse_request(
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
    tools = _tools(body.get("tools"))
    turn = ChatTurn(
        messages, tools, checked_tool_choice(_tool_choice(body.get("tool_choice")), tools)
    )
    return WireRequest(
        turn=turn,
        sampling=RequestedSampling(
            max_tokens=max_tokens,
            temperature=opt_float(body, "temperature", minimum=0, maximum=1),
            top_p=opt_float(body, "top_p", above=0, maximum=1),
            top_k=opt_int(body, "top_k", minimum=1),
            stop=opt_stop(body, "stop_sequences"),
        ),
        stream=bool(opt_bool(body, "stream")),
        model=opt_str(body, "model"),
        known=None if count_only else KnownPrefix(system, items or [], ends, turn),
    )
