"""A no-LLM agent: adds two numbers, and fails on purpose when asked to."""

from rollhub.app import RolloutApp

app = RolloutApp()


@app.rollout_entrypoint
def add(payload):
    if payload.get("fail"):
        raise ValueError(f"refusing prompt {payload['id']}")
    return {"answer": payload["a"] + payload["b"]}
