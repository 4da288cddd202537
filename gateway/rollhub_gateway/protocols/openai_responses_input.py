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


def parse_input(items: Any) -> list[dict[str, Any]]:
    """Validate ``input`` (a string or a list of items) and return neutral messages."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise WireError(
            "invalid_request",
            "'input' must be a string or a non-empty array of items",
            param="input",
        )
    out: list[dict[str, Any]] = []
    pending_reasoning: str | None = None
    for i, item in enumerate(items):
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
