"""Framework-native conversations as OpenAI-style chat messages, for results that keep them.

Each math example can return its final conversation (payload ``"capture_messages": true``)
in one shape whatever the framework: ``{"role", "content"}`` dicts, assistant tool calls as
``tool_calls`` and tool results as ``{"role": "tool", "tool_call_id", "content"}``.
"""

from __future__ import annotations

import json
from typing import Any


def from_strands(messages: list[dict[str, Any]], system: str | None = None) -> list[dict[str, Any]]:
    """Strands ``agent.messages`` (Bedrock-style content blocks) as OpenAI messages."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for message in messages:
        texts, calls = [], []
        for block in message.get("content", []):
            if "text" in block:
                texts.append(block["text"])
            elif "toolUse" in block:
                use = block["toolUse"]
                calls.append(_call(use["toolUseId"], use["name"], use.get("input", {})))
            elif "toolResult" in block:
                result = block["toolResult"]
                text = "".join(part.get("text", "") for part in result.get("content", []))
                out.append({"role": "tool", "tool_call_id": result["toolUseId"], "content": text})
        if texts or calls:
            item: dict[str, Any] = {"role": message["role"], "content": "".join(texts) or None}
            if calls:
                item["tool_calls"] = calls
            out.append(item)
    return out


def from_langchain(messages: list[Any]) -> list[dict[str, Any]]:
    """LangChain / LangGraph messages as OpenAI messages."""
    from langchain_core.messages import convert_to_openai_messages

    return list(convert_to_openai_messages(messages))


def from_anthropic(system: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Anthropic Messages-API history (``system`` + content blocks) as OpenAI messages."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for message in messages:
        content = message["content"]
        if isinstance(content, str):
            out.append({"role": message["role"], "content": content})
            continue
        texts, calls = [], []
        for block in content:
            kind = block["type"]
            if kind == "text":
                texts.append(block["text"])
            elif kind == "tool_use":
                calls.append(_call(block["id"], block["name"], block["input"]))
            elif kind == "tool_result":
                text = block["content"] if isinstance(block["content"], str) else ""
                out.append({"role": "tool", "tool_call_id": block["tool_use_id"], "content": text})
        if texts or calls:
            item: dict[str, Any] = {"role": message["role"], "content": "".join(texts) or None}
            if calls:
                item["tool_calls"] = calls
            out.append(item)
    return out


def _call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }
