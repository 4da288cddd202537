"""An agent written for agentcore-rl-toolkit, as its users write them (do not edit the import:
the one-import test swaps it for rollhub's)."""

import asyncio

from agentcore_rl_toolkit import AgentCoreRLApp

app = AgentCoreRLApp()


@app.rollout_entrypoint
async def invoke_agent(payload, context):
    rollout = payload["_rollout"]
    if payload.get("fail"):
        raise ValueError(f"bad input {payload['fail']}")
    await asyncio.sleep(payload.get("sleep", 0))
    guess = payload["a"] + payload["b"]
    return {
        "rewards": 1.0 if guess == payload["answer"] else 0.0,
        "guess": guess,
        "session_seen": context.session_id,
        "temperature_seen": rollout.get("temperature"),
        "model_seen": rollout.get("model_id"),
    }
