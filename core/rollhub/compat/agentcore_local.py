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
  built with ``commands_dir``: runs the command on this machine (starting the session, as a
  command does on AgentCore) and answers the event stream the model defines
  (:mod:`rollhub.compat.agentcore_commands`). This is what the sandbox's ``agentcore``
  provider uses, next to the rollhub shim served as the runtime's app.
- ``POST /runtimes/{agentRuntimeArn}/stopruntimesession`` (StopRuntimeSession): ends a
  session this plane has seen (404 ``ResourceNotFoundException`` otherwise). Apps that
  list ``DELETE /rollouts/{session_id}`` (rollhub's app) have the session's rollout
  cancelled, as a stopped microVM would end it.
- Runtimes added with ``protocol="A2A"`` get their invocations (``…/invocations`` and the
  A2A route ``…/invocations/``) forwarded to the app's JSON-RPC root ``/``, as AgentCore
  forwards to an A2A container's port 9000.
- ``DELETE /capacity-providers/{capacityProviderId}/sessions/{sessionId}``
  (DeleteCapacityProviderSession, 202 ``{capacityProviderArn, sessionId, status}``): ends
  a session of a runtime added with that ``capacity_provider_arn``; its A2A tasks that
  are not finished are cancelled, as the instance's end would stop them.

:meth:`LocalAgentCore.inject` makes the next calls of one operation fail with a given
service error (``"A2A:GetTask"`` names one JSON-RPC method of the A2A route), to test
what clients do with faults.

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
_FORWARDED = ("content-type", "accept", "x-amzn-bedrock-agentcore-runtime-user-id", "a2a-version")
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
        self._a2a: set[str] = set()
        #: capacity provider id -> runtime ARNs it backs
        self._providers: dict[str, set[str]] = {}
        #: (ARN, session id) -> A2A task ids seen in answers, for cancelling them
        self._tasks: dict[tuple[str, str], set[str]] = {}
        self._faults: dict[str, list[tuple[str, int]]] = {}
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
                Route("/runtimes/{arn:path}/invocations/", self._invoke, methods=["POST"]),
                Route("/runtimes/{arn:path}/invocations", self._invoke, methods=["POST"]),
                Route(
                    "/capacity-providers/{provider}/sessions/{sid}",
                    self._delete_provider_session,
                    methods=["DELETE"],
                ),
                Route("/runtimes/{arn:path}/stopruntimesession", self._stop, methods=["POST"]),
                Route("/runtimes/{arn:path}/commands", self._command, methods=["POST"]),
            ]
        )

    def add_runtime(
        self,
        arn: str,
        base_url: str,
        *,
        protocol: str = "HTTP",
        capacity_provider_arn: str | None = None,
    ) -> None:
        """Serve ``arn`` by forwarding to the app at ``base_url``.

        :param protocol: ``HTTP`` (``/invocations``) or ``A2A`` (JSON-RPC at ``/``).
        :param capacity_provider_arn: the capacity provider whose sessions these are.
        """
        if protocol not in ("HTTP", "A2A"):
            raise ConfigError(f"protocol={protocol!r}: use HTTP or A2A", field="protocol")
        if protocol == "A2A":
            self._a2a.add(arn)
        if capacity_provider_arn is not None:
            provider = capacity_provider_arn.rsplit("/", 1)[-1]
            self._providers.setdefault(provider, set()).add(arn)
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(
                f"runtimes[{arn!r}]={base_url!r} is not an http(s) URL; give the agent app's "
                f"base URL, e.g. http://127.0.0.1:8080",
                field="runtimes",
            )
        self._runtimes[arn] = base_url.rstrip("/")

    def inject(self, operation: str, code: str, status: int, *, times: int = 1) -> None:
        """Answer the next ``times`` calls of ``operation`` with the service error ``code``
        and HTTP ``status`` (``"A2A:<method>"``: a JSON-RPC method on the A2A route)."""
        self._faults.setdefault(operation, []).extend([(code, status)] * times)

    def _fault(self, operation: str) -> JSONResponse | None:
        queue = self._faults.get(operation)
        if not queue:
            return None
        code, status = queue.pop(0)
        return _error(code, f"injected fault for {operation}", status)

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
        a2a = arn in self._a2a
        if a2a:
            fault = self._fault(f"A2A:{_jsonrpc_method(body)}")
            if fault is not None:
                return fault
        with self._lock:
            self.sessions.add((arn, sid))
        try:
            async with httpx.AsyncClient(timeout=self._timeout_s) as http:
                target = f"{base}/" if a2a else f"{base}/invocations"
                answer = await http.post(target, content=body, headers=headers)
        except httpx.HTTPError as exc:
            log.warning("runtime %s did not answer: %s", arn, exc)
            # The service reports an unreachable container as a runtime client error.
            return _error("RuntimeClientError", f"the agent app did not answer: {exc}", 424)
        if answer.status_code >= 300:
            return _app_error(answer)
        if a2a:
            self._note_task(arn, sid, answer.content)
        out = {SESSION_HEADER: sid}
        if "content-type" in answer.headers:
            out["Content-Type"] = answer.headers["content-type"]
        return Response(answer.content, status_code=answer.status_code, headers=out)

    async def _stop(self, request: Request) -> Response:
        arn = unquote(request.path_params["arn"])
        sid = request.headers.get(SESSION_HEADER, "")
        self.calls.append(("StopRuntimeSession", arn, sid))
        fault = self._fault("StopRuntimeSession")
        if fault is not None:
            return fault
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
        with self._lock:  # a command starts the session, as on AgentCore
            self.sessions.add((arn, sid))
        try:
            body = json.loads(await request.body())  # the model's payload member: body
        except ValueError:
            return _error("ValidationException", "the request body is not JSON", 400)
        stream = await run_command(body, self._commands_dir)
        return Response(stream, headers={SESSION_HEADER: sid, "Content-Type": EVENTSTREAM})

    async def _delete_provider_session(self, request: Request) -> Response:
        provider, sid = request.path_params["provider"], request.path_params["sid"]
        self.calls.append(("DeleteCapacityProviderSession", provider, sid))
        fault = self._fault("DeleteCapacityProviderSession")
        if fault is not None:
            return fault
        arns = self._providers.get(provider, set())
        with self._lock:
            found = [(arn, s) for arn, s in self.sessions if s == sid and arn in arns]
            for key in found:
                self.sessions.discard(key)
        if not found:
            return _error("ResourceNotFoundException", f"no session {sid} on {provider}", 404)
        for arn, _ in found:
            for task_id in self._tasks.pop((arn, sid), set()):
                await self._cancel_task(self._runtimes[arn], sid, task_id)
        arn_of = next(iter(arns)).split(":runtime/")[0] + f":capacity-provider/{provider}"
        return JSONResponse(
            {"capacityProviderArn": arn_of, "sessionId": sid, "status": "Deleting"},
            status_code=202,
        )

    def _note_task(self, arn: str, sid: str, content: bytes) -> None:
        """Remember the A2A task an answer names, so ending the session can cancel it."""
        try:
            result = json.loads(content).get("result") or {}
        except (ValueError, AttributeError):
            return
        task = result.get("task", result) if isinstance(result, dict) else {}
        state = str((task.get("status") or {}).get("state", ""))
        task_id = task.get("id")
        if isinstance(task_id, str):
            tasks = self._tasks.setdefault((arn, sid), set())
            if state.endswith(("COMPLETED", "FAILED", "CANCELED", "REJECTED")):
                tasks.discard(task_id)
            else:
                tasks.add(task_id)

    async def _cancel_task(self, base: str, sid: str, task_id: str) -> None:
        body = {"jsonrpc": "2.0", "id": 1, "method": "CancelTask", "params": {"id": task_id}}
        try:
            async with httpx.AsyncClient(timeout=self._timeout_s) as http:
                await http.post(f"{base}/", json=body, headers={SESSION_HEADER: sid,
                                "A2A-Version": "1.0"})  # fmt: skip
        except httpx.HTTPError as exc:
            log.debug("cancel of task %s on %s failed: %s", task_id, base, exc)

    async def _cancel_rollout(self, base: str, sid: str) -> None:
        """Best effort: a stopped session's running rollout is cancelled (rollhub apps)."""
        try:
            async with httpx.AsyncClient(timeout=self._timeout_s) as http:
                await http.delete(f"{base}/rollouts/{sid}")
        except httpx.HTTPError as exc:
            log.debug("cancel of %s on %s failed: %s", sid, base, exc)


def _jsonrpc_method(body: bytes) -> str:
    try:
        method = json.loads(body).get("method")
    except (ValueError, AttributeError):
        return ""
    return method if isinstance(method, str) else ""


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
