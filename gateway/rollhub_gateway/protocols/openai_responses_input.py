"""OpenAI Responses request fields (``input``, ``tools``, ``tool_choice``) ⇄ neutral turns."""

from __future__ import annotations

from typing import Any

from rollhub_gateway.protocols.base import WireError, function_call, function_tool, json_text
from rollhub_gateway.protocols.openai_chat import content_text

__all__ = ["parse_input", "parse_tool_choice", "parse_tools"]


def _content_text(content: Any, where: str) -> str:
    return content_text(
        content,
        where,
        media=("input_image", "input_file", "input_audio"),
        hint="send input_text parts",
    )


def parse_input(
    items: Any,
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


def parse_tools(tools: Any) -> list[dict[str, Any]] | None:
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
        out.append(function_tool(t["name"], t.get("parameters"), t.get("description")))
    return out or None


def parse_tool_choice(choice: Any) -> Any:
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
