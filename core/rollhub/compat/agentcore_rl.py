"""``AgentCoreRLApp``: agents written for agentcore-rl-toolkit, run by rollhub.

One import changes, nothing else::

    # from agentcore_rl_toolkit import AgentCoreRLApp
    from rollhub.compat.agentcore_rl import AgentCoreRLApp

    app = AgentCoreRLApp()

    @app.rollout_entrypoint
    async def invoke_agent(payload, context):
        ...
        return {"rewards": 1.0}

The app is a :class:`rollhub.app.RolloutApp` that answers both invocation shapes:

- **rollhub's** (``_rollout`` with ``session_id`` and ``result_store``): as RolloutApp does.
  The handler also finds the ``sampling`` entries flat in ``_rollout`` (``temperature``,
  ``top_p``, …), where upstream's client puts them.
- **upstream's** (``_rollout`` with ``exp_id``, ``input_id``, ``s3_bucket``, optional
  ``base_url``/``model_id`` and flat extra config; the session id in the AgentCore session
  header): the result goes to ``s3://{s3_bucket}/{exp_id}/{input_id}/{session_id}.json``
  with upstream's document fields (``status_code``, ``stop_reason``, ``input_id``,
  ``s3_bucket``, ``result_key``, ``payload``; a failure is ``status_code`` 500 with
  ``stop_reason`` and ``traceback``), and the HTTP answer is upstream's
  ``{"status": "processing", "s3_bucket", "result_key"}``. So upstream's ``RolloutClient``
  and the trainers built on it drive rollhub agents unmodified.

rollhub's metadata (``_rollhub``) is stored next to upstream's fields; upstream's client
returns it as one more key.
"""

from __future__ import annotations

import inspect
import json
import logging
import traceback
import uuid
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from rollhub.app import InvalidRolloutError, RolloutApp, RolloutContext
from rollhub.app.context import SESSION_HEADER, takes_context
from rollhub.rollout import ROLLOUT_KEY, result_key

__all__ = [
    "UPSTREAM_LAYOUT",
    "AgentCoreRLApp",
    "is_upstream_rollout",
    "upstream_document",
    "upstream_error_document",
    "upstream_to_rollhub",
]

log = logging.getLogger(__name__)

#: ``_rollout.result_layout`` of invocations whose results upstream's client reads.
UPSTREAM_LAYOUT = "agentcore-rl"
#: ``_rollout`` fields upstream's app requires.
UPSTREAM_REQUIRED = ("exp_id", "input_id", "s3_bucket")
#: flat ``_rollout`` keys upstream's client sends that rollhub keeps under ``sampling``.
SAMPLING_KEYS = frozenset(
    {"temperature", "top_p", "top_k", "max_tokens", "max_completion_tokens", "stop", "seed"}
)


def is_upstream_rollout(raw: Any) -> bool:
    """Whether a ``_rollout`` object has upstream's shape (``s3_bucket``, no session id)."""
    return (
        isinstance(raw, dict)
        and "s3_bucket" in raw
        and "session_id" not in raw
        and "result_store" not in raw
    )


def upstream_to_rollhub(raw: dict[str, Any], session_id: str) -> dict[str, Any]:
    """An upstream ``_rollout`` as rollhub's: session id, result store, layout, sampling.

    :param raw: the ``_rollout`` object upstream's client sent.
    :param session_id: the AgentCore session id (the runtime's session header).
    :raises InvalidRolloutError: a required upstream field is missing.
    """
    for name in UPSTREAM_REQUIRED:
        if not raw.get(name):
            raise InvalidRolloutError(
                f"{ROLLOUT_KEY}.{name} is missing; upstream-shaped rollouts carry exp_id, "
                f"input_id and s3_bucket (or send rollhub's session_id and result_store)",
                field=f"{ROLLOUT_KEY}.{name}",
            )
    sampling = {k: v for k, v in raw.items() if k in SAMPLING_KEYS}
    return {
        **raw,
        "session_id": session_id,
        "result_store": f"s3://{raw['s3_bucket']}",
        "result_layout": UPSTREAM_LAYOUT,
        "sampling": {**sampling, **(raw.get("sampling") or {})},
    }


def upstream_document(
    result: dict[str, Any], rollout: dict[str, Any], payload: dict[str, Any]
) -> dict[str, Any]:
    """A handler's dict with the fields upstream's app adds before storing it.

    :param result: what the handler returned.
    :param rollout: the (rollhub-shaped) ``_rollout`` of the invocation.
    :param payload: the invocation payload as upstream's client sent it.
    """
    doc = dict(result)
    doc.setdefault("status_code", 200)
    doc.setdefault("stop_reason", "end_turn")
    doc["input_id"] = rollout["input_id"]
    doc["s3_bucket"] = rollout["s3_bucket"]
    doc["result_key"] = result_key(rollout["exp_id"], rollout["input_id"], rollout["session_id"])
    doc["payload"] = payload
    return doc


def upstream_error_document(
    exc: BaseException, rollout: dict[str, Any], payload: dict[str, Any]
) -> dict[str, Any]:
    """Upstream's error document: ``status_code`` 500, the message and the traceback."""
    error = {
        "status_code": 500,
        "stop_reason": str(exc),
        "traceback": "".join(traceback.format_exception(exc)),
    }
    return upstream_document(error, rollout, payload)


def _upstream_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """The payload as upstream's client sent it: its own ``_rollout`` fields only."""
    raw = dict(payload.get(ROLLOUT_KEY) or {})
    for key in ("session_id", "result_store", "result_layout", "sampling"):
        raw.pop(key, None)
    return {**payload, ROLLOUT_KEY: raw}


def _agent_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """The payload an upstream handler expects: sampling entries flat in ``_rollout``."""
    raw = payload.get(ROLLOUT_KEY)
    if not isinstance(raw, dict) or not isinstance(raw.get("sampling"), dict):
        return payload
    flat = {k: v for k, v in raw["sampling"].items() if k not in raw}
    return {**payload, ROLLOUT_KEY: {**raw, **flat}}


class AgentCoreRLApp(RolloutApp):
    """A :class:`RolloutApp` that also speaks agentcore-rl-toolkit's invocation contract.

    Takes the same keyword options as :class:`RolloutApp` (upstream's app takes none).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for i, route in enumerate(self.router.routes):
            if isinstance(route, Route) and route.path == "/invocations":
                self.router.routes[i] = Route(
                    "/invocations", self._handle_either_invocation, methods=["POST"]
                )

    def rollout_entrypoint(self, func: Callable[..., Any]) -> Callable[..., Any]:
        """Register an upstream- or rollhub-style handler (sync or async, with or without
        context); for upstream-shaped invocations its dict is stored in upstream's layout.
        """
        wants_context = takes_context(func)

        def args_for(payload: dict[str, Any], context: RolloutContext) -> tuple[Any, ...]:
            agent_payload = _agent_payload(payload)
            return (agent_payload, context) if wants_context else (agent_payload,)

        def finish(
            payload: dict[str, Any],
            context: RolloutContext,
            result: Any = None,
            error: Exception | None = None,
        ) -> Any:
            rollout = context.rollout
            layout = (rollout.model_extra or {}).get("result_layout") if rollout else None
            if layout != UPSTREAM_LAYOUT:
                if error is not None:
                    raise error
                return result
            wire = rollout.wire_dict()  # type: ignore[union-attr]
            sent = _upstream_payload(payload)
            if error is not None:
                log.warning("rollout %s failed: %s", wire["session_id"], error)
                return upstream_error_document(error, wire, sent)
            if not isinstance(result, dict):
                error = TypeError(f"Return value must be a dict, got {type(result).__name__}")
                return upstream_error_document(error, wire, sent)
            return upstream_document(result, wire, sent)

        if inspect.iscoroutinefunction(func):

            async def wrapper(payload: dict[str, Any], context: RolloutContext) -> Any:
                try:
                    result = await func(*args_for(payload, context))
                except Exception as exc:
                    return finish(payload, context, error=exc)
                return finish(payload, context, result)

        else:

            def wrapper(payload: dict[str, Any], context: RolloutContext) -> Any:  # type: ignore[misc]
                try:
                    result = func(*args_for(payload, context))
                except Exception as exc:
                    return finish(payload, context, error=exc)
                return finish(payload, context, result)

        wrapper.__name__ = getattr(func, "__name__", "rollout")
        super().rollout_entrypoint(wrapper)
        return func

    async def _handle_either_invocation(self, request: Request) -> Response:
        raw = await request.body()  # cached by Starlette: the parent reads it again
        try:
            payload = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            payload = None
        if not isinstance(payload, dict) or not is_upstream_rollout(payload.get(ROLLOUT_KEY)):
            return await self._handle_invocation(request)
        refused = self._guard.check_signature(request, raw)
        if refused is not None:
            return refused
        stuck = self.runner.exhausted
        if stuck is not None:
            return JSONResponse({"error": stuck}, status_code=503)
        session_id = request.headers.get(SESSION_HEADER) or str(uuid.uuid4())
        try:
            rollout = upstream_to_rollhub(payload[ROLLOUT_KEY], session_id)
            run = self.start_rollout({**payload, ROLLOUT_KEY: rollout}, headers=request.headers)
        except InvalidRolloutError as exc:
            return JSONResponse({"error": exc.message, "field": exc.field}, status_code=400)
        return JSONResponse(
            {
                "status": "processing",
                "s3_bucket": rollout["s3_bucket"],
                "result_key": result_key(rollout["exp_id"], rollout["input_id"], session_id),
                "result": run.location,
            }
        )
