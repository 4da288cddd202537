"""A rollout agent with a setup phase and no model, for the A2A container tests: setup lays
a workspace note, the run checks ``a + b`` and says where and with which types it ran."""

from __future__ import annotations

import os

from rollhub.app import RolloutApp

app = RolloutApp()
_prepared: dict[str, str] = {}


@app.rollout_setup
def setup(payload: dict, context) -> None:
    _prepared[context.session_id] = f"workspace for {payload['a']}+{payload['b']}"


@app.rollout_entrypoint
def solve(payload: dict, context) -> dict:
    total = payload["a"] + payload["b"]
    return {
        "rewards": 1.0 if total == payload["answer"] else 0.0,
        "sum": total,
        "types": {k: type(v).__name__ for k, v in payload.items() if k != "_rollout"},
        "prepared": _prepared.pop(context.session_id, None),
        "hostname": os.uname().nodename,
        "uid": os.getuid(),
    }
