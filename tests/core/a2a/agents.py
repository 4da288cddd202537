"""Rollout agents the A2A tests serve: a math agent with a setup phase, and misbehaving ones."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

from rollhub.app import RolloutApp


def math_app(marker_dir: Path | None = None) -> RolloutApp:
    """Checks ``a + b`` against ``answer``; setup lays a file the run reads back.

    ``sleep`` makes the run wait (a marker file is written only if it was not cancelled),
    ``reward_nan`` returns a NaN reward, ``fail_setup`` fails the setup.
    """
    app = RolloutApp()
    prepared: dict[str, str] = {}

    @app.rollout_setup
    async def setup(payload, context):
        if payload.get("fail_setup"):
            raise RuntimeError(f"cannot prepare: {payload['fail_setup']}")
        prepared[context.session_id] = f"workspace for {payload['a']}+{payload['b']}"

    @app.rollout_entrypoint
    async def solve(payload, context):
        if payload.get("sleep"):
            try:
                await asyncio.sleep(payload["sleep"])
            except asyncio.CancelledError:
                app.state.cancelled = True
                raise
            if marker_dir is not None:
                (marker_dir / f"{context.session_id}.done").write_text("ran to the end")
        total = payload["a"] + payload["b"]
        reward = math.nan if payload.get("reward_nan") else float(total == payload["answer"])
        return {
            "rewards": reward,
            "sum": total,
            "types": {k: type(v).__name__ for k, v in payload.items() if k != "_rollout"},
            "big": payload.get("big"),
            "prepared": prepared.get(context.session_id),
            "session_seen": context.session_id,
            "metrics": {"turns": 1},
        }

    app.state.cancelled = False
    return app
