"""The agent of the image test: checks ``a + b`` and says who and where it ran."""

from __future__ import annotations

import os
import platform

from rollhub.app import RolloutApp

app = RolloutApp()


@app.rollout_entrypoint
def solve(payload: dict, context) -> dict:
    total = payload["a"] + payload["b"]
    return {
        "rewards": 1.0 if total == payload["answer"] else 0.0,
        "sum": total,
        "uid": os.getuid(),
        "machine": platform.machine(),
        "session_seen": context.session_id,
    }
