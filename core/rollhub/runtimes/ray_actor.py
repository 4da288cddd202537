"""The actor behind the ``ray`` runtime: the user's RolloutApp, without HTTP.

A plain class (the runtime wraps it with ``ray.remote`` when it starts, so importing this
module never imports Ray). Each actor loads the app once and runs rollouts through the
app's own :class:`~rollhub.app.runner.RolloutRunner`: the same handler call, the same
result document, the same store write and completion notice as ``POST /invocations``.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["RolloutActor"]

log = logging.getLogger(__name__)


class RolloutActor:
    """Runs rollouts of one app inside a Ray worker process (an async actor)."""

    def __init__(self, app_ref: str) -> None:
        from rollhub.runtimes.local_worker import load_app

        self.app = load_app(app_ref)
        self.handler = getattr(self.app, "_rollout_handler", None)
        if self.handler is None:
            raise TypeError(f"{app_ref!r} has no @app.rollout_entrypoint handler")

    def ready(self) -> int:
        """Answer once the app is loaded; returns the worker's pid."""
        import os

        return os.getpid()

    async def run(self, wire: dict[str, Any]) -> str:
        """Run one rollout to its stored result; return the stored status."""
        from rollhub.app.context import RolloutContext, takes_context
        from rollhub.rollout import ROLLOUT_KEY, RolloutConfig

        rollout = RolloutConfig.model_validate(wire[ROLLOUT_KEY])
        store = self.app.store_for(rollout.result_store)
        args: tuple[Any, ...] = (wire,)
        if takes_context(self.handler):
            args = (
                wire,
                RolloutContext(session_id=rollout.session_id, rollout=rollout, request_headers={}),
            )
        run = self.app.runner.start(self.handler, args, rollout=rollout, payload=wire, store=store)
        await run.task
        doc = store.get(rollout.result_key) or {}
        return str((doc.get("_rollhub") or {}).get("status", "error"))

    async def cancel(self, session_id: str) -> bool:
        """Cancel a running rollout and wait until its CancelledError result is stored."""
        return await self.app.runner.cancel(
            session_id, reason=f"rollout {session_id} cancelled by the client"
        )

    def running(self) -> list[str]:
        """Session ids running in this actor."""
        return sorted(self.app.runner.running)
