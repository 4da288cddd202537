"""OpenAI Responses requests (``input``, ``tools``, ``tool_choice``…) → neutral turns
(:func:`parse_request`; every 400 names its field). :mod:`.openai_responses` writes the
responses."""

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
from rollhub_gateway.protocols.fields import json_text, opt_bool, opt_float, opt_int, opt_str
from rollhub_gateway.protocols.known_prefix import KnownPrefix, reusable_prefix
from rollhub_gateway.protocols.openai_chat_input import content_text
from rollhub_gateway.protocols.tool_fields import checked_tool, checked_tool_choice
from rollhub_gateway.turns import ChatTurn, ToolChoice

__all__ = ["parse_input", "parse_request", "parse_tool_choice", "parse_tools"]

log = logging.getLogger(__name__)


def _content_text(content: object, where: str) -> str:
    return content_text(
        content,
        where,
        media=("input_image", "input_file", "input_audio"),
        hint="send input_text parts",
    )


def parse_input(
    items: object,
    out: list[dict[str, Any]] | None = None,
    ends: list[int | None] | None = None,
    start: int = 0,
) -> list[dict[str, Any]]:
    """Validate ``input`` (a string or a list of items) and return neutral messages.

    :param out: neutral messages already made (of the instructions and ``items[:start]``,
        reused from the session's previous call); appended to. Its last message must not
        be an assistant message: a ``function_call`` item would join it.
    :param ends: gets, after each item, the messages made so far, or ``None`` where a
        reasoning item's text waits for the assistant message after it (a parse cannot
        resume there).
    """
    out = [] if out is None else out
    ends = [] if ends is None else ends
    if isinstance(items, str):
        out.append({"role": "user", "content": items})
        return out
    if not isinstance(items, list) or not items:
        raise WireError(
            "invalid_request",
            "'input' must be a string or a non-empty array of items",
            param="input",
        )
    pending_reasoning: str | None = None
    for i in range(start, len(items)):
        item = items[i]
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise WireError("invalid_request", f"{where} must be an object", param=where)
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role == "developer":
                role = "system"
            if role not in ("system", "user", "assistant"):
                raise WireError(
                    "invalid_request",
                    f"{where}.role={role!r} must be system, developer, user or assistant",
                    param=f"{where}.role",
                )
            msg: dict[str, Any] = {
                "role": role,
                "content": _content_text(item.get("content"), where),
            }
            if role == "assistant" and pending_reasoning:
                msg["reasoning_content"], pending_reasoning = pending_reasoning, None
            out.append(msg)
        elif kind == "function_call":
            if not isinstance(item.get("name"), str) or not isinstance(item.get("call_id"), str):
                raise WireError(
                    "invalid_request",
                    f"{where} (function_call) needs 'call_id' and 'name'",
                    param=where,
                )
            call = function_call(
                item["call_id"],
                item["name"],
                json_text(item.get("arguments", "{}"), f"{where}.arguments"),
            )
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                msg = {"role": "assistant", "content": None, "tool_calls": [call]}
                if pending_reasoning:
                    msg["reasoning_content"], pending_reasoning = pending_reasoning, None
                out.append(msg)
        elif kind == "function_call_output":
            if not isinstance(item.get("call_id"), str):
                raise WireError(
                    "invalid_request", f"{where}.call_id is required", param=f"{where}.call_id"
                )
            output = item.get("output", "")
            text = output if isinstance(output, str) else _content_text(output, where)
            out.append({"role": "tool", "tool_call_id": item["call_id"], "content": text})
        elif kind == "reasoning":
            parts = item.get("content") or item.get("summary") or []
            pending_reasoning = "".join(
                str(p.get("text", "")) for p in parts if isinstance(p, dict)
            )
        else:
            raise WireError(
                "invalid_request",
                f"{where}.type={kind!r} is not supported (message, function_call, function_call_output, reasoning)",
                param=f"{where}.type",
            )
        ends.append(None if pending_reasoning else len(out))
    return out


def parse_tools(tools: object) -> list[dict[str, Any]] | None:
    """Validate Responses function tools (flat: ``name`` beside ``type``)."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise WireError("invalid_request", "'tools' must be an array", param="tools")
    out = []
    for i, t in enumerate(tools):
        if not isinstance(t, dict) or t.get("type") != "function":
            raise WireError(
                "invalid_request",
                f"tools[{i}]: only function tools are supported (type 'function')",
                param=f"tools[{i}].type",
            )
        if not isinstance(t.get("name"), str):
            raise WireError(
                "invalid_request", f"tools[{i}].name is required", param=f"tools[{i}].name"
            )
        out.append(
            checked_tool(
                t["name"],
                t.get("parameters"),
                t.get("description"),
                where=f"tools[{i}]",
                schema="parameters",
            )
        )
    return out or None


def parse_tool_choice(choice: object) -> ToolChoice:
    """``tool_choice`` in neutral form."""
    if choice is None or choice in ("none", "auto", "required"):
        return choice
    if (
        isinstance(choice, dict)
        and choice.get("type") == "function"
        and isinstance(choice.get("name"), str)
    ):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise WireError(
        "invalid_request",
        "'tool_choice' must be none, auto, required or {type: function, name}",
        param="tool_choice",
    )


def parse_request(body: Mapping[str, Any], *, known: KnownPrefix | None = None) -> WireRequest:
    """Validate a request body; every 400 names its field.

    :param known: the :class:`KnownPrefix` of the session's previous call: the leading
        items sent exactly as then are not parsed again.
    """
    if body.get("previous_response_id") is not None:
        raise WireError(
            "invalid_request",
            "'previous_response_id' is not supported: the gateway stores no responses; send the whole conversation as 'input'",
            param="previous_response_id",
        )
    if "input" not in body:
        raise WireError("invalid_request", "missing required field 'input'", param="input")
    items, instructions = body["input"], body.get("instructions")
    start, reused, ends = reusable_prefix(items, instructions, known)
    # a function_call item joins the assistant message before it: never resume there
    while start and ((end := ends[start]) is None or reused[end - 1]["role"] == "assistant"):
        start -= 1
    if start:
        messages, ends = reused[: ends[start]], ends[: start + 1]
    else:
        if instructions is not None and not isinstance(instructions, str):
            raise WireError(
                "invalid_request", "'instructions' must be a string", param="instructions"
            )
        messages = [] if instructions is None else [{"role": "system", "content": instructions}]
        ends = [len(messages)]
    parse_input(items, messages, ends, start)
    tools = parse_tools(body.get("tools"))
    turn = ChatTurn(
        messages, tools, checked_tool_choice(parse_tool_choice(body.get("tool_choice")), tools)
    )
    # OpenAI's range, checked like Chat's (Responses output carries no alternatives)
    opt_int(body, "top_logprobs", minimum=0, maximum=20)
    return WireRequest(
        turn=turn,
        sampling=RequestedSampling(
            max_tokens=opt_int(body, "max_output_tokens", minimum=1),
            temperature=opt_float(body, "temperature", minimum=0, maximum=2),
            top_p=opt_float(body, "top_p", above=0, maximum=1),
        ),
        stream=bool(opt_bool(body, "stream")),
        model=opt_str(body, "model"),
        known=KnownPrefix(instructions, items, ends, turn) if isinstance(items, list) else None,
        options={
            "body": {
                k: body.get(k)
                for k in (
                    "instructions",
                    "tools",
                    "tool_choice",
                    "temperature",
                    "top_p",
                    "max_output_tokens",
                    "metadata",
                )
            }
        },
    )
