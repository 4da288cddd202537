"""An agent for training-loop tests: reward by sample index, records what it served."""

from __future__ import annotations

import asyncio
import json

from rollhub.app import RolloutApp

app = RolloutApp()


@app.rollout_entrypoint
async def handle(payload, context):
    await asyncio.sleep(float(payload.get("delay", 0.0)))
    index = context.rollout.sample_index or 0
    if payload.get("fail_index") == index:
        raise ValueError("failed on purpose")
    if payload.get("log"):
        with open(payload["log"], "a", encoding="utf-8") as f:
            f.write(json.dumps({"id": payload["id"], "version": context.rollout.weight_version,
                                "sample": index}) + "\n")
    return {"rewards": float(index % 2), "weight_version": context.rollout.weight_version}
