"""A rollhub agent for the cross tests: checks ``a + b`` against ``answer``, fails on demand.

Built per test by :func:`make_app`: like upstream's, the app makes its S3 client when it is
constructed, so it must be built after the test's AWS environment is set.
"""

from __future__ import annotations

import asyncio

from rollhub.compat import AgentCoreRLApp


def make_app() -> AgentCoreRLApp:
    """A fresh math agent app."""
    app = AgentCoreRLApp()

    @app.rollout_entrypoint
    async def solve(payload, context):
        if payload.get("fail"):
            raise RuntimeError(f"asked to fail: {payload['fail']}")
        await asyncio.sleep(payload.get("sleep", 0))
        guess = payload["a"] + payload["b"]
        rollout = payload["_rollout"]
        return {
            "rewards": 1.0 if guess == payload["answer"] else 0.0,
            "guess": guess,
            "session_seen": context.session_id,
            "temperature_seen": rollout.get("temperature"),
            "model_seen": rollout.get("model_id"),
        }

    return app
