"""The actor behind the ``ray`` runtime: the user's RolloutApp, without HTTP.

A plain class (the runtime wraps it with ``ray.remote`` when it starts, so importing this
module never imports Ray). Each actor loads the app once and runs rollouts through the
app's own :class:`~rollhub.app.runner.RolloutRunner`: the same handler call, the same
result document, the same store write and completion notice as ``POST /invocations``.
``start`` returns once the rollout runs (like the HTTP 200), ``wait`` ends when its result
is stored (the runtime watches it for liveness), ``cancel`` stores a cancelled result, and
``lifeline`` never returns: its failure tells the runtime this actor died.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

__all__ = ["RolloutActor"]

log = logging.getLogger(__name__)


class RolloutActor:
    """Runs rollouts of one app inside a Ray worker process (an async actor)."""

    def __init__(self, app_ref: str) -> None:
        from rollhub.runtimes.local_worker import load_app

        self.app = load_app(app_ref)
        handler = getattr(self.app, "_rollout_handler", None)
        self._loop: asyncio.AbstractEventLoop | None = None
        if handler is None:
            raise TypeError(f"{app_ref!r} has no @app.rollout_entrypoint handler")
        self.handler: Callable[..., Any] = handler

    def ready(self) -> dict[str, Any]:
        """Answer once the app is loaded: the worker's pid and its Ray node's id."""
        import os

        import ray

        return {"pid": os.getpid(), "node_id": ray.get_runtime_context().get_node_id()}

    async def start(self, wire: dict[str, Any]) -> str:
        """Start one rollout in the background (once per session); return its location.

        The runtime calls this in the actor's ``control`` concurrency group, so it answers
        even when every rollout slot is busy.
        """
        from rollhub.app.context import RolloutContext, takes_context
        from rollhub.rollout import ROLLOUT_KEY, RolloutConfig

        rollout = RolloutConfig.model_validate(wire[ROLLOUT_KEY])
        store = self.app.store_for(rollout.result_store)
        args: tuple[Any, ...] = (wire,)
        if takes_context(self.handler):
            context = RolloutContext(
                session_id=rollout.session_id, rollout=rollout, request_headers={}
            )
            args = (wire, context)
        # Ray runs each concurrency group on its own event loop: the runner's tasks live on
        # this (control) loop, and wait() reaches them from the default group's loop.
        self._loop = asyncio.get_running_loop()
        run = self.app.runner.start(self.handler, args, rollout=rollout, payload=wire, store=store)
        return str(run.location)

    async def wait(self, session_id: str) -> bool:
        """Wait until the session's result is stored; False if it was not running."""
        run = self.app.runner.running.get(session_id)
        if run is None or self._loop is None:
            return False
        done = asyncio.run_coroutine_threadsafe(_finished(run.task), self._loop)
        await asyncio.wrap_future(done)
        return True

    async def cancel(self, session_id: str) -> bool:
        """Cancel a running rollout and wait until its CancelledError result is stored."""
        return await self.app.runner.cancel(
            session_id, reason=f"rollout {session_id} cancelled by the client"
        )

    async def lifeline(self) -> None:
        """Never return: the runtime holds this call open (in the ``control`` group) and
        learns from its failure that this actor's process is gone."""
        await asyncio.Event().wait()

    def running(self) -> list[str]:
        """Session ids running in this actor."""
        return sorted(self.app.runner.running)


async def _finished(task: asyncio.Task[Any]) -> None:
    await asyncio.wait({task})
