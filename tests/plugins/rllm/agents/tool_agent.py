"""A plain-``openai`` tool agent for the rLLM tests; its behaviour is chosen by the payload.

``mode``: ``tools`` (call ``lookup`` until the model answers; reward 1.0), ``fail`` (raise),
``hang`` (sleep for an hour), ``die`` (kill its own worker process), ``echo`` (no model
call: return the model endpoint it was given). ``stream`` streams the model calls.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal

from openai import AsyncOpenAI
from rollhub.app import RolloutApp

app = RolloutApp()

LOOKUP = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a key up.",
        "parameters": {
            "type": "object",
            "properties": {"key": {"type": "string"}},
            "required": ["key"],
        },
    },
}


async def _call(client: AsyncOpenAI, model: str, messages: list, stream: bool) -> dict:
    """One model call; returns the assistant message as a plain dict."""
    if not stream:
        reply = await client.chat.completions.create(model=model, messages=messages, tools=[LOOKUP])
        return reply.choices[0].message.model_dump(exclude_none=True)
    content, calls = "", {}
    events = await client.chat.completions.create(
        model=model, messages=messages, tools=[LOOKUP], stream=True
    )
    async for chunk in events:
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for tc in choice.delta.tool_calls or []:
                entry = calls.setdefault(
                    tc.index,
                    {"id": tc.id, "type": "function", "function": {"name": "", "arguments": ""}},
                )
                entry["function"]["name"] += tc.function.name or ""
                entry["function"]["arguments"] += tc.function.arguments or ""
    message = {"role": "assistant", "content": content or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message


@app.rollout_entrypoint
async def handle(payload, context):
    mode = payload.get("mode", "tools")
    rollout = context.rollout
    if mode == "fail":
        raise RuntimeError(f"agent failed on purpose for {payload.get('id')}")
    if mode == "hang":
        await asyncio.sleep(3600)
    if mode == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "echo":
        return {"rewards": [0.0, 0.5], "base_url": rollout.base_url, "model_id": rollout.model_id}
    client = AsyncOpenAI(base_url=rollout.base_url, api_key=rollout.api_key.get_secret_value())
    messages = [{"role": "user", "content": payload.get("question", "Look up a, b and c.")}]
    lookups = []
    for _ in range(8):
        message = await _call(client, rollout.model_id, messages, bool(payload.get("stream")))
        messages.append(message)
        if not message.get("tool_calls"):
            break
        for tc in message["tool_calls"]:
            key = json.loads(tc["function"]["arguments"])["key"]
            lookups.append(key)
            messages.append(
                {"role": "tool", "tool_call_id": tc["id"], "content": f"{key}={ord(key)}"}
            )
    await client.close()
    return {"rewards": 1.0, "lookups": lookups, "answer": messages[-1].get("content")}
