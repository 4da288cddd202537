"""The agent of ``bench/bench_ray_cluster.py``: ``turns`` model calls through its capture
session, each followed by ``cpu_ms`` of busy work (a tool that computes) and ``io_ms`` of
waiting (a tool that calls a service)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from openai import AsyncOpenAI
from rollhub.app import RolloutApp, RolloutContext

app = RolloutApp()


@app.rollout_entrypoint
async def handle(payload: dict[str, Any], context: RolloutContext) -> dict[str, Any]:
    rollout = context.rollout
    api_key = rollout.api_key.get_secret_value() if rollout.api_key else "EMPTY"
    client = AsyncOpenAI(base_url=rollout.base_url, api_key=api_key, max_retries=0)
    messages: list[dict[str, Any]] = []
    try:
        for i in range(int(payload.get("turns", 2))):
            messages.append({"role": "user", "content": f"step {i}"})
            r = await client.chat.completions.create(model=rollout.model_id, messages=messages)
            messages.append({"role": "assistant", "content": r.choices[0].message.content})
            end = time.perf_counter() + float(payload.get("cpu_ms", 0)) / 1000
            while time.perf_counter() < end:  # a tool that computes holds the event loop
                pass
            await asyncio.sleep(float(payload.get("io_ms", 0)) / 1000)
    finally:
        await client.close()
    return {"rewards": 1.0}
