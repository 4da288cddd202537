"""``AgentCoreRLApp``: agents written for agentcore-rl-toolkit, run by rollhub.

One import changes, nothing else::

    # from agentcore_rl_toolkit import AgentCoreRLApp
    from rollhub.compat import AgentCoreRLApp

    app = AgentCoreRLApp()

    @app.rollout_entrypoint
    async def invoke_agent(payload, context):
        ...
        return {"rewards": 1.0}

The app is a :class:`rollhub.app.RolloutApp` that answers both invocation shapes:

- **rollhub's** (``_rollout`` with ``session_id`` or ``result_store``): as RolloutApp does.
  The handler also finds the ``sampling`` entries flat in ``_rollout`` (``temperature``,
  ``top_p``, …), where upstream's client puts them.
- **upstream's** (anything else), as upstream's app answers it: with ``exp_id``,
  ``input_id`` and ``s3_bucket`` in ``_rollout`` the result goes to
  ``s3://{s3_bucket}/{exp_id}/{input_id}/{session_id}.json`` with upstream's document
  fields (``status_code``, ``stop_reason``, ``input_id``, ``s3_bucket``, ``result_key``,
  ``payload``; a failure is ``status_code`` 500 with ``stop_reason`` and ``traceback``),
  written with ``app.s3_client``, and the answer is ``{"status": "processing", "s3_bucket",
  "result_key"}``; with some of the three missing it is HTTP 500 ``Missing required rollout
  config field: '...'``; without any of them (no ``_rollout``, ``{}``, only ``base_url``)
  the handler runs with no save and the answer is ``{"status": "processing"}``.

Saved rollouts run on rollhub's runner (exactly one stored outcome each, cancellation
through ``DELETE /rollouts/{id}`` and the data plane's ``StopRuntimeSession``); rollhub's
metadata (``_rollhub``) is stored next to upstream's fields.
"""

from __future__ import annotations

import inspect
import json
import logging
import traceback
import uuid
from collections.abc import Callable
from typing import Any

import boto3
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from rollhub.app import InvalidRolloutError, RolloutApp, RolloutContext
from rollhub.app.context import SESSION_HEADER, forwardable_headers, takes_context
from rollhub.compat.upstream_store import UPSTREAM_REQUIRED, ClientS3Store, RolloutConfig
from rollhub.rollout import ROLLOUT_KEY, result_key

__all__ = [
    "UPSTREAM_LAYOUT",
    "AgentCoreRLApp",
    "is_rollhub_rollout",
    "upstream_document",
    "upstream_error_document",
    "upstream_to_rollhub",
]

log = logging.getLogger(__name__)

#: ``_rollout.result_layout`` of invocations whose results upstream's client reads.
UPSTREAM_LAYOUT = "agentcore-rl"
#: flat ``_rollout`` keys upstream's client sends that rollhub keeps under ``sampling``.
SAMPLING_KEYS = frozenset(
    {"temperature", "top_p", "top_k", "max_tokens", "max_completion_tokens", "stop", "seed"}
)
#: the ``result_store`` of upstream-shaped rollouts: the app's own S3 client, one bucket.
_CLIENT_STORE = "agentcore-rl+s3://"


def is_rollhub_rollout(raw: object) -> bool:
    """Whether a ``_rollout`` object is rollhub's (it names ``session_id`` or ``result_store``)."""
    return isinstance(raw, dict) and ("session_id" in raw or "result_store" in raw)


def upstream_to_rollhub(raw: dict[str, Any], session_id: str) -> dict[str, Any]:
    """An upstream ``_rollout`` as rollhub's: session id, result store, layout, sampling.

    :param raw: the ``_rollout`` object upstream's client sent.
    :param session_id: the AgentCore session id (the runtime's session header).
    :raises ValueError: a required upstream field is missing (upstream's message).
    """
    config = RolloutConfig.from_dict(raw)
    sampling = {k: v for k, v in raw.items() if k in SAMPLING_KEYS}
    return {
        **raw,
        "session_id": session_id,
        "result_store": _CLIENT_STORE + config.s3_bucket,
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

    :param options: :class:`RolloutApp`'s keyword options (upstream's app takes none).

    :ivar s3_client: the boto3 S3 client upstream-shaped results are written with; assign
        another (a stub in tests) and the next result uses it.
    :ivar handlers: ``handlers["main"]`` is the registered ``(payload, context)``
        coroutine that starts a rollout and returns the ``processing`` answer.
    """

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.s3_client = boto3.client("s3")
        self._upstream_main: Callable[..., Any] | None = None
        for i, route in enumerate(self.router.routes):
            if isinstance(route, Route) and route.path == "/invocations":
                self.router.routes[i] = Route(
                    "/invocations", self._handle_either_invocation, methods=["POST"]
                )

    def save_result(
        self,
        result: dict[str, Any],
        rollout_config: dict[str, Any],
        result_key: str,
        payload: dict[str, Any] | None = None,
    ) -> None:
        """Write ``result`` with upstream's fields to S3 through :attr:`s3_client`.

        Adds ``status_code`` (200) and ``stop_reason`` (``end_turn``) when absent and sets
        ``input_id``, ``s3_bucket``, ``result_key`` and (when given) ``payload``, in place.

        :raises ValueError: ``rollout_config`` lacks ``exp_id``, ``input_id`` or ``s3_bucket``.
        :raises botocore.exceptions.ClientError: S3 refused the write.
        """
        config = RolloutConfig.from_dict(rollout_config)
        result.setdefault("status_code", 200)
        result.setdefault("stop_reason", "end_turn")
        result["input_id"] = config.input_id
        result["s3_bucket"] = config.s3_bucket
        result["result_key"] = result_key
        if payload is not None:
            result["payload"] = payload
        ClientS3Store(lambda: self.s3_client, config.s3_bucket).put(result_key, result)

    def rollout_entrypoint(self, func: Callable[..., Any]) -> Callable[..., Any]:
        """Register an upstream- or rollhub-style handler (sync or async, with or without
        context). Returns upstream's registered entrypoint, ``handlers["main"]``."""
        wants_context = takes_context(func)

        def args_for(payload: dict[str, Any], context: RolloutContext) -> tuple[Any, ...]:
            agent_payload = _agent_payload(payload)
            return (agent_payload, context) if wants_context else (agent_payload,)

        def finish(
            payload: dict[str, Any],
            context: RolloutContext,
            result: object = None,
            error: Exception | None = None,
        ) -> object:
            rollout = context.rollout
            layout = (rollout.model_extra or {}).get("result_layout") if rollout else None
            if rollout is None or layout != UPSTREAM_LAYOUT:
                if error is not None:
                    raise error
                return result
            wire = rollout.wire_dict()
            sent = _upstream_payload(payload)
            if error is not None:
                log.warning("rollout %s failed: %s", wire["session_id"], error)
                return upstream_error_document(error, wire, sent)
            if not isinstance(result, dict):
                error = ValueError(
                    "Return value must be a dict when S3 save is configured, "
                    f"got {type(result).__name__}"
                )
                return upstream_error_document(error, wire, sent)
            return upstream_document(result, wire, sent)

        if inspect.iscoroutinefunction(func):

            async def wrapper(payload: dict[str, Any], context: RolloutContext) -> object:
                try:
                    result = await func(*args_for(payload, context))
                except Exception as exc:
                    return finish(payload, context, error=exc)
                return finish(payload, context, result)

        else:

            def wrapper(payload: dict[str, Any], context: RolloutContext) -> object:  # type: ignore[misc]  # the sync twin of the async wrapper above
                try:
                    result = func(*args_for(payload, context))
                except Exception as exc:
                    return finish(payload, context, error=exc)
                return finish(payload, context, result)

        wrapper.__name__ = getattr(func, "__name__", "rollout")
        super().rollout_entrypoint(wrapper)
        main = self._upstream_entry(func, wants_context)
        self._upstream_main = main
        return self.entrypoint(main)

    def _upstream_entry(self, func: Callable[..., Any], wants_context: bool) -> Callable[..., Any]:
        """Upstream's ``(payload, context)`` entrypoint for ``func``."""

        async def main(payload: dict[str, Any], context: object) -> dict[str, Any]:
            raw = payload.get(ROLLOUT_KEY)
            session_id = getattr(context, "session_id", None) or str(uuid.uuid4())
            headers = getattr(context, "request_headers", None) or {}
            if not (isinstance(raw, dict) and any(f in raw for f in UPSTREAM_REQUIRED)):
                ctx = RolloutContext(session_id=session_id, request_headers=dict(headers))
                args = (payload, ctx) if wants_context else (payload,)
                self.runner.spawn(self._run_unsaved(func, args))
                return {"status": "processing"}
            rollout = upstream_to_rollhub(raw, session_id)
            store = rollout["result_store"]
            if store not in self._stores:
                bucket = raw["s3_bucket"]
                self._stores[store] = ClientS3Store(lambda: self.s3_client, bucket)
            self.start_rollout({**payload, ROLLOUT_KEY: rollout}, headers=headers)
            return {
                "status": "processing",
                "s3_bucket": raw["s3_bucket"],
                "result_key": result_key(raw["exp_id"], raw["input_id"], session_id),
            }

        main.__name__ = getattr(func, "__name__", "rollout")
        main.__doc__ = func.__doc__
        return main

    async def _run_unsaved(self, func: Callable[..., Any], args: tuple[Any, ...]) -> None:
        """A handler run without S3 settings: its result is dropped, as upstream drops it."""
        name = getattr(func, "__name__", "rollout")
        task_id = self.add_async_task(name)
        try:
            await self.runner.call(func, args)
        except Exception:
            log.exception("%s failed (no S3 settings in _rollout: nothing is stored)", name)
        finally:
            self.complete_async_task(task_id)

    async def _handle_either_invocation(self, request: Request) -> Response:
        raw = await request.body()  # cached by Starlette: the parent reads it again
        main = self.handlers.get("main")
        try:
            payload = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            payload = None
        if (
            main is None
            or main is not self._upstream_main
            or not isinstance(payload, dict)
            or is_rollhub_rollout(payload.get(ROLLOUT_KEY))
        ):
            return await self._handle_invocation(request)
        refused = self._guard.check_signature(request, raw)
        if refused is not None:
            return refused
        stuck = self.runner.exhausted
        if stuck is not None:
            return JSONResponse({"error": stuck}, status_code=503)
        context = RolloutContext(
            session_id=request.headers.get(SESSION_HEADER) or str(uuid.uuid4()),
            request_headers=forwardable_headers(request.headers),
        )
        try:
            answer = await main(payload, context)
        except InvalidRolloutError as exc:
            return JSONResponse(
                {"error": exc.message, "field": exc.context.get("field")}, status_code=400
            )
        except Exception as exc:  # upstream's app answers any entrypoint error with a 500
            log.exception("invocation failed")
            return JSONResponse({"error": str(exc)}, status_code=500)
        return JSONResponse(answer)
