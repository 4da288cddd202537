"""A local AgentCore data plane: the ``bedrock-agentcore`` wire format on loopback.

It answers the two data-plane calls rollout clients make, as botocore's service model
(``bedrock-agentcore`` 2024-02-28, ``rest-json``) defines them, and forwards each
invocation to a local agent app (any server speaking the AgentCore Runtime contract:
``POST /invocations``, ``GET /ping``):

- ``POST /runtimes/{agentRuntimeArn}/invocations`` (InvokeAgentRuntime): the body is the
  payload blob, the session id is the ``X-Amzn-Bedrock-AgentCore-Runtime-Session-Id``
  header; the answer is the app's body with the session header echoed. An app's non-2xx
  answer becomes a service error (429 ``ThrottlingException``, 5xx
  ``InternalServerException``, other ``RuntimeClientError`` 424) whose message carries the
  app's status and body.
- ``POST /runtimes/{agentRuntimeArn}/commands`` (InvokeAgentRuntimeCommand), only when
  built with ``commands_dir``: runs the command on this machine for a session this plane
  has seen and answers the event stream the model defines
  (:mod:`rollhub.compat.agentcore_commands`). This is what the sandbox's ``agentcore``
  provider uses, next to the rollhub shim served as the runtime's app.
- ``POST /runtimes/{agentRuntimeArn}/stopruntimesession`` (StopRuntimeSession): ends a
  session this plane has seen (404 ``ResourceNotFoundException`` otherwise). Apps that
  list ``DELETE /rollouts/{session_id}`` (rollhub's app) have the session's rollout
  cancelled, as a stopped microVM would end it.

Errors use the rest-json shape botocore parses: the ``x-amzn-ErrorType`` header and a
``{"message": ...}`` body. Request signatures are not checked (nothing leaves loopback).

The real boto3 client reaches it through ``endpoint_url`` or the
``AWS_ENDPOINT_URL_BEDROCK_AGENTCORE`` environment variable (any credentials)::

    plane = LocalAgentCore({ARN: "http://127.0.0.1:8080"})
    with serve_app(plane) as url:
        client = boto3.client("bedrock-agentcore", endpoint_url=url, region_name="us-west-2")
        client.invoke_agent_runtime(agentRuntimeArn=ARN, runtimeSessionId=sid, payload=b"{}")
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import unquote

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from rollhub.app.context import SESSION_HEADER
from rollhub.compat.agentcore_commands import EVENTSTREAM, run_command
from rollhub.errors import ConfigError

__all__ = ["ENDPOINT_ENV", "LocalAgentCore", "runtime_arn"]

log = logging.getLogger(__name__)

#: The environment variable boto3 reads for this service's endpoint.
ENDPOINT_ENV = "AWS_ENDPOINT_URL_BEDROCK_AGENTCORE"
# Headers a real runtime forwards to the container besides the session id.
_FORWARDED = ("content-type", "accept", "x-amzn-bedrock-agentcore-runtime-user-id")
_FORWARDED_PREFIX = "x-amzn-bedrock-agentcore-runtime-custom-"


def runtime_arn(name: str, *, region: str = "us-west-2", account: str = "123456789012") -> str:
    """A well-formed AgentCore runtime ARN for a local runtime name."""
    return f"arn:aws:bedrock-agentcore:{region}:{account}:runtime/{name}"


class LocalAgentCore(Starlette):
    """The InvokeAgentRuntime / StopRuntimeSession endpoints, forwarding to local apps.

    :param runtimes: runtime ARN → base URL of the agent app serving it
        (``http://127.0.0.1:PORT``). More can be added with :meth:`add_runtime`.
    :param timeout_s: how long one forwarded invocation may take.
    :param commands_dir: run ``InvokeAgentRuntimeCommand`` commands in this directory, as
        the serving user (default: refused with ``AccessDeniedException``).
    """

    def __init__(
        self,
        runtimes: Mapping[str, str] | None = None,
        *,
        timeout_s: float = 60.0,
        commands_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self._runtimes: dict[str, str] = {}
        for arn, url in (runtimes or {}).items():
            self.add_runtime(arn, url)
        self._timeout_s = timeout_s
        self._commands_dir = Path(commands_dir) if commands_dir is not None else None
        self._lock = threading.Lock()
        #: (runtime ARN, session id) pairs invoked and not stopped yet.
        self.sessions: set[tuple[str, str]] = set()
        #: every call seen, in order: ``(operation, arn, session id)`` (for tests and logs).
        self.calls: list[tuple[str, str, str]] = []
        super().__init__(
            routes=[
                Route("/runtimes/{arn:path}/invocations", self._invoke, methods=["POST"]),
                Route("/runtimes/{arn:path}/stopruntimesession", self._stop, methods=["POST"]),
                Route("/runtimes/{arn:path}/commands", self._command, methods=["POST"]),
            ]
        )

    def add_runtime(self, arn: str, base_url: str) -> None:
        """Serve ``arn`` by forwarding to the app at ``base_url``."""
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(
                f"runtimes[{arn!r}]={base_url!r} is not an http(s) URL; give the agent app's "
                f"base URL, e.g. http://127.0.0.1:8080",
                field="runtimes",
            )
        self._runtimes[arn] = base_url.rstrip("/")

    # Handlers ----------------------------------------------------------------------------

    async def _invoke(self, request: Request) -> Response:
        arn = unquote(request.path_params["arn"])
        sid = request.headers.get(SESSION_HEADER, "")
        self.calls.append(("InvokeAgentRuntime", arn, sid))
        base = self._runtimes.get(arn)
        if base is None:
            return _error("ResourceNotFoundException", f"no runtime {arn}", 404)
        if not 33 <= len(sid) <= 256:
            # botocore checks this client side too; other clients may not.
            return _error(
                "ValidationException",
                f"runtimeSessionId must be 33-256 characters, got {len(sid)}",
                400,
            )
        headers = {SESSION_HEADER: sid}
        for key, value in request.headers.items():
            if key in _FORWARDED or key.startswith(_FORWARDED_PREFIX):
                headers[key] = value
        body = await request.body()
        with self._lock:
            self.sessions.add((arn, sid))
        try:
            async with httpx.AsyncClient(timeout=self._timeout_s) as http:
                answer = await http.post(f"{base}/invocations", content=body, headers=headers)
        except httpx.HTTPError as exc:
            log.warning("runtime %s did not answer: %s", arn, exc)
            # The service reports an unreachable container as a runtime client error.
            return _error("RuntimeClientError", f"the agent app did not answer: {exc}", 424)
        if answer.status_code >= 300:
            return _app_error(answer)
        out = {SESSION_HEADER: sid}
        if "content-type" in answer.headers:
            out["Content-Type"] = answer.headers["content-type"]
        return Response(answer.content, status_code=answer.status_code, headers=out)

    async def _stop(self, request: Request) -> Response:
        arn = unquote(request.path_params["arn"])
        sid = request.headers.get(SESSION_HEADER, "")
        self.calls.append(("StopRuntimeSession", arn, sid))
        base = self._runtimes.get(arn)
        if base is None:
            return _error("ResourceNotFoundException", f"no runtime {arn}", 404)
        with self._lock:
            known = (arn, sid) in self.sessions
            self.sessions.discard((arn, sid))
        if not known:
            return _error("ResourceNotFoundException", f"no session {sid} on {arn}", 404)
        await self._cancel_rollout(base, sid)
        return Response(b"{}", headers={SESSION_HEADER: sid, "Content-Type": "application/json"})

    async def _command(self, request: Request) -> Response:
        arn = unquote(request.path_params["arn"])
        sid = request.headers.get(SESSION_HEADER, "")
        self.calls.append(("InvokeAgentRuntimeCommand", arn, sid))
        if arn not in self._runtimes:
            return _error("ResourceNotFoundException", f"no runtime {arn}", 404)
        if self._commands_dir is None:
            return _error(
                "AccessDeniedException",
                "this local data plane runs no commands; build it with commands_dir=",
                403,
            )
        if (arn, sid) not in self.sessions:
            return _error("ResourceNotFoundException", f"no session {sid} on {arn}", 404)
        try:
            body = json.loads(await request.body())  # the model's payload member: body
        except ValueError:
            return _error("ValidationException", "the request body is not JSON", 400)
        stream = await run_command(body, self._commands_dir)
        return Response(stream, headers={SESSION_HEADER: sid, "Content-Type": EVENTSTREAM})

    async def _cancel_rollout(self, base: str, sid: str) -> None:
        """Best effort: a stopped session's running rollout is cancelled (rollhub apps)."""
        try:
            async with httpx.AsyncClient(timeout=self._timeout_s) as http:
                await http.delete(f"{base}/rollouts/{sid}")
        except httpx.HTTPError as exc:
            log.debug("cancel of %s on %s failed: %s", sid, base, exc)


def _app_error(answer: httpx.Response) -> JSONResponse:
    """An app's non-2xx answer as the service error a client can act on: 429 throttles,
    5xx is the server's (retryable), any other status a runtime client error."""
    message = f"the agent app answered HTTP {answer.status_code}: {answer.text[:1000]}"
    if answer.status_code == 429:
        return _error("ThrottlingException", message, 429)
    if answer.status_code >= 500:
        return _error("InternalServerException", message, 500)
    return _error("RuntimeClientError", message, 424)


def _error(code: str, message: str, status: int) -> JSONResponse:
    """A rest-json service error as botocore parses it."""
    return JSONResponse(
        {"message": message}, status_code=status, headers={"x-amzn-ErrorType": code}
    )
