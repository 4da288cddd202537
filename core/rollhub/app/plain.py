"""Plain AgentCore invocations (``@app.entrypoint``): the handler's value is the answer.

A dict or list becomes JSON, a Starlette ``Response`` is sent as is, and a generator
(sync or async) streams as server-sent events, as the AgentCore app does.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from rollhub.app.context import RolloutContext, forwardable_headers, takes_context
from rollhub.app.runner import RolloutRunner

__all__ = ["invoke_plain"]

log = logging.getLogger(__name__)


async def invoke_plain(
    runner: RolloutRunner,
    handler: Callable[..., Any],
    request: Request,
    session_id: str,
    payload: object,
) -> Response:
    """Call ``handler`` off the server loop and turn its value into the HTTP answer."""
    args: tuple[Any, ...] = (payload,)
    if takes_context(handler):
        context = RolloutContext(
            session_id=session_id,
            request_headers=forwardable_headers(request.headers),
            request=request,
        )
        args = (payload, context)
    try:
        result = await runner.call(handler, args)
    except HTTPException as exc:
        return JSONResponse({"error": exc.detail}, status_code=exc.status_code)
    except Exception as exc:
        log.exception("invocation failed")
        return JSONResponse({"error": str(exc)}, status_code=500)
    if isinstance(result, Response):
        return result
    if inspect.isgenerator(result) or inspect.isasyncgen(result):
        return StreamingResponse(_sse(result), media_type="text/event-stream")
    return Response(_to_json(result), media_type="application/json")


def _to_json(value: object) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return json.dumps(value, ensure_ascii=False, default=str)


async def _sse(stream: Iterator[object] | AsyncIterator[object]) -> AsyncIterator[bytes]:
    """Server-sent events from a sync or async generator, as AgentCore streams them."""
    try:
        if isinstance(stream, AsyncIterator):  # an async generator (else a sync one)
            async for item in stream:
                yield f"data: {_to_json(item)}\n\n".encode()
        else:
            done = object()
            while True:
                item = await asyncio.to_thread(next, stream, done)
                if item is done:
                    break
                yield f"data: {_to_json(item)}\n\n".encode()
    except Exception as exc:
        log.exception("error while streaming")
        event = {"error": str(exc), "error_type": type(exc).__name__}
        yield f"data: {_to_json(event)}\n\n".encode()
