"""An agent for the pool's hub test: ``payload["turns"]`` chat calls through its capture
session (the replica the hub placed it on), with the SDK's retries set to
``payload["retries"]``; returns the replies it read."""

from __future__ import annotations

from openai import AsyncOpenAI
from rollhub.app import RolloutApp

app = RolloutApp()


@app.rollout_entrypoint
async def handle(payload, context):
    rollout = context.rollout
    client = AsyncOpenAI(
        base_url=rollout.base_url,
        api_key=rollout.api_key.get_secret_value(),
        max_retries=payload.get("retries", 0),
    )
    messages, replies = [], []
    try:
        for i in range(payload["turns"]):
            messages.append({"role": "user", "content": f"question {i}"})
            r = await client.chat.completions.create(model=rollout.model_id, messages=messages)
            replies.append(r.choices[0].message.content)
            messages.append({"role": "assistant", "content": replies[-1]})
    finally:
        await client.close()
    return {"rewards": 1.0, "replies": replies}
