"""agentcore-rl-toolkit's ``AgentCoreHttpClient``: invocations that can be resumed.

``invoke(payload, session_id=..., invocation_id=..., background=True)`` starts an
invocation (:mod:`rollhub.compat.runtime_protocol`) and returns an :class:`InvocationHandle`
whose ``result()`` polls ``get`` until the invocation ends; ``get_invocation`` rebuilds a
handle from its ids alone (after a lost response or a restart). Keep the invocation id to
retry: a start with a known id never runs twice. An app that ignores the envelope (a
plain ``BedrockAgentCoreApp``) answers with its result, which becomes a completed handle.

The AWS calls go through boto3's ``bedrock-agentcore`` client in a worker thread, behind
``_aws_client``: an object with ``async invoke_agent_runtime(**kw)`` and ``async
stop_runtime_session(**kw)`` (upstream's aiobotocore shape: the answer's ``response`` is
read with ``async with ... as body: await body.read()``).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal, Protocol, overload

from rollhub.compat.runtime_protocol import ENVELOPE_KEY, VERSION, InvocationRequest, state
from rollhub.json_types import JSON

if TYPE_CHECKING:
    from rollhub.compat.session_bounds import RateLimiter

__all__ = ["AgentCoreDataPlane", "AgentCoreHttpClient", "InvocationError", "InvocationHandle"]


class AgentCoreDataPlane(Protocol):
    """The ``bedrock-agentcore`` calls the client makes, awaited (aiobotocore's shape: the
    answer's ``response`` is read with ``async with ... as body: await body.read()``)."""

    async def invoke_agent_runtime(self, **kwargs: object) -> dict[str, Any]:
        """Invoke the runtime: ``statusCode`` and ``response`` (the body) in the answer."""
        ...

    async def stop_runtime_session(self, **kwargs: object) -> dict[str, Any]:
        """Stop a runtime session."""
        ...


class _SyncAgentCore(Protocol):
    """boto3's ``bedrock-agentcore`` client, as far as it is called here."""

    def invoke_agent_runtime(self, **kwargs: object) -> dict[str, Any]: ...

    def stop_runtime_session(self, **kwargs: object) -> dict[str, Any]: ...

#: seconds between two ``get`` polls of a handle
POLL_INTERVAL = 10.0
_STATUSES = ("in_progress", "completed", "interrupted", "not_found")


class InvocationError(RuntimeError):
    """An invocation failed, was interrupted, or is unknown. Context: ``session_id``,
    ``invocation_id``, ``snapshot``."""

    def __init__(self, session_id: str, snapshot: dict[str, Any]) -> None:
        self.session_id = session_id
        self.invocation_id = snapshot["invocation_id"]
        self.snapshot = snapshot
        super().__init__(
            f"Invocation {self.invocation_id}: {snapshot.get('error', snapshot['status'])}"
        )

    def __reduce__(self) -> tuple[type[InvocationError], tuple[str, dict[str, Any]]]:
        return (InvocationError, (self.session_id, self.snapshot))


class InvocationHandle:
    """One invocation; ``result(timeout=...)`` bounds the local wait only."""

    def __init__(
        self,
        client: AgentCoreHttpClient,
        session_id: str,
        invocation_id: str,
        snapshot: dict[str, Any] | None = None,
    ) -> None:
        self.client = client
        self.session_id = session_id
        self.invocation_id = invocation_id
        self._snapshot = snapshot

    async def status(self) -> dict[str, Any]:
        """The invocation's state (a completed one is not asked for again)."""
        if self._snapshot is None or self._snapshot["status"] != "completed":
            envelope = {"version": VERSION, "operation": "get", "invocation_id": self.invocation_id}
            value = await self.client._request(self.session_id, {ENVELOPE_KEY: envelope})
            self._snapshot = _checked(value, self.invocation_id)
        return self._snapshot

    async def result(self, timeout: float | None = None) -> JSON:
        """The invocation's JSON result; :class:`InvocationError` when it did not complete
        with one, ``TimeoutError`` after ``timeout`` seconds."""
        async with asyncio.timeout(timeout):
            snapshot = self._snapshot or await self.status()
            while snapshot["status"] == "in_progress":
                await asyncio.sleep(POLL_INTERVAL)
                snapshot = await self.status()
            if snapshot["status"] == "completed" and "result" in snapshot:
                return snapshot["result"]
            raise InvocationError(self.session_id, snapshot)


class _Body:
    """A read answer body with aiobotocore's async reading shape."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    async def __aenter__(self) -> _Body:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def read(self) -> bytes:
        return self._data


class _ThreadedAgentCore:
    """boto3's ``bedrock-agentcore`` client, its calls awaited in a worker thread."""

    def __init__(self, client: _SyncAgentCore) -> None:
        self._client = client

    async def invoke_agent_runtime(self, **kwargs: object) -> dict[str, Any]:
        def call() -> dict[str, Any]:
            answer = self._client.invoke_agent_runtime(**kwargs)
            return {**answer, "response": _Body(answer["response"].read())}

        return await asyncio.to_thread(call)

    async def stop_runtime_session(self, **kwargs: object) -> dict[str, Any]:
        return dict(await asyncio.to_thread(self._client.stop_runtime_session, **kwargs))


class AgentCoreHttpClient:
    """Invokes an AgentCore runtime's HTTP agent, foreground or in the background.

    :param runtime_arn: the runtime (its region is read from it).
    :param max_pool_connections: HTTP connections of the boto3 client.
    :param read_timeout: seconds a foreground call may wait for its answer.
    :param request_rate_limiter: an object whose ``await wait_async()`` gates each call.
    :param aws_client: ``await aws_client()`` gives an open ``bedrock-agentcore`` client
        the caller owns (0.2.0's option; default: boto3's, in a worker thread).
    """

    def __init__(
        self,
        runtime_arn: str,
        *,
        max_pool_connections: int = 100,
        read_timeout: float = 900,
        request_rate_limiter: RateLimiter | None = None,
        aws_client: Callable[[], Awaitable[AgentCoreDataPlane]] | None = None,
    ) -> None:
        self.runtime_arn = runtime_arn
        self._aws_client_provider = aws_client
        self._request_rate_limiter = request_rate_limiter
        self._max_pool = max_pool_connections
        self._read_timeout = read_timeout
        self._aws_client: AgentCoreDataPlane | None = None
        self._open_lock = asyncio.Lock()

    async def __aenter__(self) -> AgentCoreHttpClient:
        await self._aws()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _aws(self) -> AgentCoreDataPlane:
        if self._aws_client_provider is not None:
            return await self._aws_client_provider()
        async with self._open_lock:
            if self._aws_client is None:
                import boto3
                from botocore.config import Config

                config = Config(max_pool_connections=self._max_pool,
                                read_timeout=self._read_timeout,
                                user_agent_extra="rollhub-compat")  # fmt: skip
                region = self.runtime_arn.split(":")[3]
                self._aws_client = _ThreadedAgentCore(
                    boto3.client("bedrock-agentcore", region_name=region, config=config)
                )
            return self._aws_client

    async def aclose(self) -> None:
        """Drop the AWS client (after every caller is done)."""
        async with self._open_lock:
            self._aws_client = None

    @overload
    async def invoke(
        self,
        payload: dict[str, Any],
        *,
        session_id: str,
        invocation_id: str | None = None,
        background: Literal[False] = False,
    ) -> JSON: ...

    @overload
    async def invoke(
        self,
        payload: dict[str, Any],
        *,
        session_id: str,
        invocation_id: str | None = None,
        background: Literal[True],
    ) -> InvocationHandle: ...

    @overload
    async def invoke(
        self,
        payload: dict[str, Any],
        *,
        session_id: str,
        invocation_id: str | None = None,
        background: bool = False,
    ) -> JSON | InvocationHandle: ...

    async def invoke(
        self,
        payload: dict[str, Any],
        *,
        session_id: str,
        invocation_id: str | None = None,
        background: bool = False,
    ) -> JSON | InvocationHandle:
        """Start an invocation: its result (foreground) or its handle (``background``).
        Keep ``invocation_id`` to retry or reattach after a lost answer."""
        invocation_id = invocation_id if invocation_id is not None else uuid.uuid4().hex
        envelope = {"version": VERSION, "operation": "start", "invocation_id": invocation_id,
                    "background": background}  # fmt: skip
        InvocationRequest.parse(envelope)
        if ENVELOPE_KEY in payload:
            raise ValueError(f"{ENVELOPE_KEY} is reserved for the HTTP client")
        value = await self._request(session_id, {**payload, ENVELOPE_KEY: envelope})
        if (
            isinstance(value, dict)
            and {"version", "status", "invocation_id"} <= value.keys()
            and value["invocation_id"] == invocation_id
        ):
            snapshot = _checked(value, invocation_id)
        else:  # an app that does not speak the envelope answered with its result
            snapshot = {**state(invocation_id, "completed"), "result": value}
        handle = InvocationHandle(self, session_id, invocation_id, snapshot)
        return handle if background else await handle.result()

    def get_invocation(self, *, session_id: str, invocation_id: str) -> InvocationHandle:
        """A handle from ids alone (no call is made)."""
        InvocationRequest.parse({"version": VERSION, "operation": "get",
                                 "invocation_id": invocation_id})  # fmt: skip
        return InvocationHandle(self, session_id, invocation_id)

    async def stop_session(self, session_id: str) -> None:
        """Stop the runtime session."""
        client = await self._aws()
        if self._request_rate_limiter is not None:
            await self._request_rate_limiter.wait_async()
        await client.stop_runtime_session(agentRuntimeArn=self.runtime_arn,
                                          runtimeSessionId=session_id)  # fmt: skip

    async def _request(self, session_id: str, payload: dict[str, Any]) -> JSON:
        body = json.dumps(payload, allow_nan=False).encode()
        client = await self._aws()
        if self._request_rate_limiter is not None:
            await self._request_rate_limiter.wait_async()
        answer = await client.invoke_agent_runtime(
            agentRuntimeArn=self.runtime_arn, runtimeSessionId=session_id,
            contentType="application/json", accept="application/json", payload=body,
        )  # fmt: skip
        async with answer["response"] as stream:
            raw = await stream.read()
        if answer["statusCode"] != 200:
            raise RuntimeError(
                f"InvokeAgentRuntime returned HTTP {answer['statusCode']}: {raw.decode()}"
            )
        answer_value: JSON = json.loads(raw)
        return answer_value


def _checked(value: JSON, invocation_id: str) -> dict[str, Any]:
    """An invocation state answer, validated."""
    if (
        not isinstance(value, dict)
        or isinstance(value.get("version"), bool)
        or value.get("version") != VERSION
        or value.get("invocation_id") != invocation_id
        or value.get("status") not in _STATUSES
    ):
        raise ValueError(f"Invalid invocation response for {invocation_id}")
    if value["status"] == "completed":
        if ("result" in value) == ("error" in value) or (
            "error" in value and not isinstance(value["error"], str)
        ):
            raise ValueError(f"Invalid completed response for {invocation_id}")
    elif "result" in value or "error" in value:
        raise ValueError(f"Unexpected terminal output for {invocation_id}")
    return value
