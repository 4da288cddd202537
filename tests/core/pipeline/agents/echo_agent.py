"""A trivial agent for pipeline tests: echoes the payload, fails or stalls on request."""

from __future__ import annotations

import asyncio

from rollhub.app import RolloutApp

app = RolloutApp()


@app.rollout_entrypoint
async def handle(payload, context):
    mode = payload.get("mode", "ok")
    if mode == "fail":
        raise ValueError(f"agent failed on purpose for {payload['id']}")
    if mode == "stall":
        await asyncio.sleep(3600)
    return {
        "rewards": float(payload.get("reward", 1.0)),
        "prepared_by": payload.get("prepared_by"),
        "sample_index": context.rollout.sample_index,
        "weight_version": context.rollout.weight_version,
        "sampling": dict(context.rollout.sampling),
    }
