"""agentcore-rl-toolkit's ``AgentCoreRuntimeApp``: an ``@app.entrypoint`` app whose
invocations can also be started in the background and looked up later.

Requests without ``_agentcore_runtime`` are answered as rollhub's app answers them (plain
entrypoint, or a rollout). With it (:mod:`rollhub.compat.runtime_protocol`), ``start``
runs the entrypoint once per invocation id (a repeated start answers the existing
record), off the serving loop, and persists its result under ``state_dir``; ``get``
answers the record. ``/ping`` is HealthyBusy while one runs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from rollhub.app.context import RolloutContext, forwardable_headers, takes_context
from rollhub.app.server import RolloutApp
from rollhub.compat.runtime_protocol import ENVELOPE_KEY, InvocationRequest, InvocationStore, state

__all__ = ["AgentCoreRuntimeApp"]

log = logging.getLogger(__name__)


class AgentCoreRuntimeApp(RolloutApp):
    """Adds persisted start/get invocations to ``@app.entrypoint``.

    :param background: run requests without ``_agentcore_runtime`` as background
        invocations too, under ids the app makes (0.2.0's option; default: as before).
    :param state_dir: where invocation records live (default: ``.agentcore_runtime`` in
        the temp directory; a managed mount keeps them across compute replacement).
    :param kwargs: :class:`~rollhub.app.RolloutApp`'s keyword options.
    """

    def __init__(
        self, *, background: bool = False, state_dir: str | Path | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self._background = background
        self._store = InvocationStore(state_dir)
        self._lock = asyncio.Lock()
        self._live: dict[str, asyncio.Task[dict[str, Any]]] = {}

    async def _handle_invocation(self, request: Request) -> Response:
        raw = await request.body()
        try:
            payload = json.loads(raw)
        except ValueError:
            payload = None
        if not isinstance(payload, dict) or (ENVELOPE_KEY not in payload and not self._background):
            return await super()._handle_invocation(request)
        refused = self._guard.check_signature(request, raw)
        if refused is not None:
            return refused
        if ENVELOPE_KEY in payload:
            try:
                invocation = InvocationRequest.parse(payload[ENVELOPE_KEY])
            except ValueError as exc:
                return JSONResponse({"error": str(exc)}, status_code=400)
        else:
            invocation = InvocationRequest("start", uuid.uuid4().hex, background=True)
        handler = self.handlers.get("main")
        if handler is None:
            return JSONResponse({"error": "No entrypoint defined"}, status_code=500)
        session_id = request.headers.get("x-amzn-bedrock-agentcore-runtime-session-id", "")
        body = {k: v for k, v in payload.items() if k != ENVELOPE_KEY}
        args: tuple[object, ...] = (body,)
        if takes_context(handler):
            headers = forwardable_headers(request.headers)
            args = (body, RolloutContext(session_id=session_id, request_headers=headers))
        # accepted independently of the connection: a dropped request must not split a
        # persisted start from its execution
        accept = asyncio.ensure_future(self._dispatch(invocation, handler, args, session_id))
        try:
            return JSONResponse(await asyncio.shield(accept))
        except Exception as exc:
            return JSONResponse({"error": str(exc)}, status_code=500)

    async def _dispatch(
        self,
        invocation: InvocationRequest,
        handler: Callable[..., object],
        args: tuple[object, ...],
        session_id: str,
    ) -> dict[str, Any]:
        iid = invocation.invocation_id
        async with self._lock:
            execution = self._live.get(iid)
            record = await asyncio.to_thread(self._store.read, session_id, iid)
            if record is None and execution is not None:
                record = state(iid, "in_progress")
            if record is not None:
                if record["status"] == "in_progress" and execution is None:
                    record = state(iid, "interrupted")
            elif invocation.operation == "get":
                record = state(iid, "not_found")
            else:
                await asyncio.to_thread(self._store.start, session_id, iid)
                execution = asyncio.ensure_future(self._execute(iid, handler, args, session_id))
                self._live[iid] = execution
                record = state(iid, "in_progress")
        if invocation.operation == "start" and not invocation.background and execution is not None:
            return await asyncio.shield(execution)
        return record

    async def _execute(
        self, iid: str, handler: Callable[..., object], args: tuple[object, ...], session_id: str
    ) -> dict[str, Any]:
        busy = self.add_async_task(getattr(handler, "__name__", "invocation"))
        terminal = state(iid, "completed")
        try:
            try:
                terminal["result"] = await self.runner.call(handler, args)
                await asyncio.to_thread(self._store.finish, session_id, terminal)
            except Exception as exc:
                log.exception("invocation %s failed", iid)
                terminal = {**state(iid, "completed"), "error": str(exc)}
                await asyncio.to_thread(self._store.finish, session_id, terminal)
            return terminal
        finally:
            self._live.pop(iid, None)
            self.complete_async_task(busy)
