"""A tiny agent app for client tests: modes select what the handler does."""

import asyncio
import os

from rollhub.app import RolloutApp

app = RolloutApp()


@app.rollout_entrypoint
async def run(payload, context):
    mode = payload.get("mode", "noop")
    if mode == "sleep":
        await asyncio.sleep(float(payload.get("seconds", 0.1)))
    elif mode == "hang":
        await asyncio.sleep(3600)
    elif mode == "fail":
        raise ValueError(f"agent failed on purpose: {payload.get('x')}")
    return {"rewards": 1.0, "x": payload.get("x"), "pid": os.getpid()}
