"""``agentcore``: rollouts on AWS Bedrock AgentCore Runtime, through boto3.

Each rollout is one ``InvokeAgentRuntime`` call on the ``bedrock-agentcore`` data plane
(the app answers at once with ``{"status": "processing", ...}`` and keeps running in its
microVM); ``StopRuntimeSession`` frees the microVM when the client has the result or gives
up. Both calls share one token bucket per runtime ARN (the service's per-runtime TPS
limit) and botocore's adaptive retries. The region comes from the ARN.

Session ids: AgentCore wants ``runtimeSessionId`` of at least 33 characters (read from
botocore's service model, not hard-coded). Shorter rollhub ids are extended with a
deterministic hash suffix, so a later stop names the same session.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import re
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import Field, field_validator

from rollhub.errors import ConfigError, SubmissionError
from rollhub.rollout import RolloutRequest, SubmitReceipt
from rollhub.runtime import Runtime, RuntimeOptions
from rollhub.submission.ratelimit import limiter_for

if TYPE_CHECKING:
    from botocore.client import BaseClient

__all__ = [
    "AgentCoreRuntime",
    "AgentCoreRuntimeOptions",
    "agentcore_session_id",
    "session_id_bounds",
]

log = logging.getLogger(__name__)

SERVICE = "bedrock-agentcore"
# \Z, not $: $ also matches before a final newline
_ARN = re.compile(
    r"^arn:aws[a-z-]*:bedrock-agentcore:(?P<region>[a-z0-9-]+):(?P<account>\d{12}):runtime/(?P<name>[A-Za-z0-9_-]+)\Z"
)

#: error codes a retry may fix; every other service error is permanent.
TRANSIENT_CODES = frozenset(
    {
        "ThrottlingException",
        "ServiceQuotaExceededException",
        "RetryableConflictException",
        "InternalServerException",
        "ServiceUnavailableException",
        "RequestTimeout",
    }
)


class AgentCoreRuntimeOptions(RuntimeOptions):
    """``[runtime]`` options of the ``agentcore`` runtime."""

    runtime_arn: str = Field(description="arn:aws:bedrock-agentcore:REGION:ACCOUNT:runtime/NAME")
    qualifier: str | None = Field(None, description="endpoint name (default: the DEFAULT endpoint)")
    tps: float = Field(
        25.0, gt=0, description="InvokeAgentRuntime + StopRuntimeSession calls per second"
    )
    max_attempts: int = Field(8, ge=1, description="botocore adaptive-retry attempts per call")
    read_timeout_s: float = Field(60.0, gt=0, description="socket read timeout of one call")
    max_pool_connections: int = Field(64, ge=1, description="HTTP connections to the service")
    endpoint_url: str | None = Field(None, description="override the service endpoint (testing)")
    profile: str | None = Field(None, description="AWS profile name (default: the usual chain)")

    @field_validator("runtime_arn")
    @classmethod
    def _arn(cls, value: str) -> str:
        if not _ARN.match(value):
            raise ValueError(
                f"runtime_arn={value!r} is not an AgentCore runtime ARN; expected "
                f"arn:aws:bedrock-agentcore:<region>:<12-digit account>:runtime/<name>"
            )
        return value

    @property
    def region(self) -> str:
        """The region named in the ARN."""
        match = _ARN.match(self.runtime_arn)
        assert match is not None
        return match["region"]


@functools.cache
def session_id_bounds() -> tuple[int, int]:
    """(min, max) length of ``runtimeSessionId`` per botocore's service model."""
    import botocore.session

    model = botocore.session.get_session().get_service_model(SERVICE)
    shape = model.operation_model("InvokeAgentRuntime").input_shape.members["runtimeSessionId"]
    return int(shape.metadata.get("min", 1)), int(shape.metadata.get("max", 256))


def agentcore_session_id(session_id: str) -> str:
    """The ``runtimeSessionId`` for a rollhub session id (same id when long enough)."""
    low, high = session_id_bounds()
    if len(session_id) > high:
        raise ConfigError(f"session_id {session_id!r} is longer than AgentCore's {high} characters")
    if len(session_id) >= low:
        return session_id
    suffix = hashlib.sha256(session_id.encode()).hexdigest()
    return f"{session_id}-{suffix}"[: max(low, len(session_id) + 1 + 16)]


class AgentCoreRuntime(Runtime):
    """AWS Bedrock AgentCore Runtime.

    :param options: :class:`AgentCoreRuntimeOptions`, or its fields as keywords.
    :param client: a ready ``bedrock-agentcore`` boto3 client (tests, custom sessions).
    """

    name: ClassVar[str] = "agentcore"
    Options: ClassVar[type[RuntimeOptions]] = AgentCoreRuntimeOptions

    def __init__(
        self,
        options: AgentCoreRuntimeOptions | None = None,
        *,
        client: BaseClient | None = None,
        **fields: Any,
    ) -> None:
        fields.pop("base_dir", None)
        super().__init__(options, **fields)
        self.options: AgentCoreRuntimeOptions
        self.client = client
        self.limiter = limiter_for(f"agentcore:{self.options.runtime_arn}", self.options.tps)

    async def start(self) -> None:
        """Create the boto3 client (lazily imported) unless one was given."""
        if self.client is None:
            self.client = self._make_client()

    def _make_client(self) -> BaseClient:
        try:
            import boto3
            from botocore.config import Config
        except ImportError as exc:  # pragma: no cover - boto3 ships with the extra
            raise ConfigError(
                "the agentcore runtime needs boto3: pip install 'rollhub[agentcore]'"
            ) from exc
        opts = self.options
        session = boto3.session.Session(profile_name=opts.profile, region_name=opts.region)
        config = Config(
            region_name=opts.region,
            retries={"mode": "adaptive", "total_max_attempts": opts.max_attempts},
            read_timeout=opts.read_timeout_s,
            max_pool_connections=opts.max_pool_connections,
        )
        return session.client(SERVICE, config=config, endpoint_url=opts.endpoint_url)

    def _call_args(self, session_id: str) -> dict[str, Any]:
        args: dict[str, Any] = {
            "agentRuntimeArn": self.options.runtime_arn,
            "runtimeSessionId": agentcore_session_id(session_id),
        }
        if self.options.qualifier:
            args["qualifier"] = self.options.qualifier
        return args

    async def submit(self, request: RolloutRequest) -> SubmitReceipt:
        """``InvokeAgentRuntime`` with the wire payload; the app answers at once."""
        await self.start()
        sid = request.rollout.session_id
        args = self._call_args(sid)
        body = json.dumps(request.to_wire(), separators=(",", ":")).encode()
        await self.limiter.acquire()
        try:
            response = await asyncio.to_thread(
                self._invoke,
                dict(args, payload=body, contentType="application/json", accept="application/json"),
            )
        except Exception as exc:
            raise _map_error(exc, "InvokeAgentRuntime", sid) from exc
        status = int(response.get("statusCode") or 200)
        answer = response.get("_body", {})
        if status >= 300:
            raise SubmissionError(
                f"AgentCore answered HTTP {status} for session {sid}: {answer}",
                transient=status >= 500 or status == 429,
                session_id=sid,
            )
        if isinstance(answer, dict) and answer.get("error"):
            raise SubmissionError(
                f"the agent refused session {sid}: {answer}", transient=False, session_id=sid
            )
        return SubmitReceipt(
            session_id=sid,
            result_location=str(answer.get("result", "")) if isinstance(answer, dict) else "",
            runtime=self.name,
            details={
                "runtime_session_id": args["runtimeSessionId"],
                "runtime_arn": self.options.runtime_arn,
            },
        )

    def _invoke(self, args: dict[str, Any]) -> dict[str, Any]:
        assert self.client is not None  # submit started the runtime first
        response = self.client.invoke_agent_runtime(**args)
        stream = response.get("response")
        raw = stream.read() if stream is not None else b""
        try:
            response["_body"] = json.loads(raw) if raw else {}
        except ValueError:
            response["_body"] = {"raw": raw[:500].decode(errors="replace")}
        return response

    async def cancel(self, session_id: str) -> None:
        """``StopRuntimeSession`` (rate limited); a session already gone is not an error."""
        if self.client is None:
            return
        await self.limiter.acquire()
        try:
            await asyncio.to_thread(self.client.stop_runtime_session, **self._call_args(session_id))
        except Exception as exc:
            err = _map_error(exc, "StopRuntimeSession", session_id)
            if getattr(err, "code", None) == "ResourceNotFoundException":
                return
            raise err from exc

    async def close(self) -> None:
        """Drop the client (boto3 clients hold only pooled connections)."""
        client, self.client = self.client, None
        if client is not None and hasattr(client, "close"):
            client.close()


def _map_error(exc: Exception, operation: str, session_id: str) -> SubmissionError:
    """A botocore exception as a :class:`SubmissionError` that says whether to retry."""
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        HTTPClientError,
        ParamValidationError,
    )
    from botocore.exceptions import (
        ConnectionError as BotoConnectionError,
    )

    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", "Unknown"))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        transient = code in TRANSIENT_CODES or status >= 500 or status == 429
        return SubmissionError(
            f"{operation} failed for session {session_id}: {code}: {error.get('Message', '')}",
            transient=transient,
            code=code,
            status_code=status,
            session_id=session_id,
        )
    if isinstance(exc, ParamValidationError):
        return SubmissionError(
            f"{operation} request for session {session_id} is invalid: {exc}",
            transient=False,
            session_id=session_id,
        )
    if isinstance(exc, BotoConnectionError | HTTPClientError):
        return SubmissionError(
            f"{operation} could not reach AgentCore: {exc}", transient=True, session_id=session_id
        )
    if isinstance(exc, BotoCoreError):
        return SubmissionError(f"{operation} failed: {exc}", transient=False, session_id=session_id)
    return SubmissionError(
        f"{operation} failed: {type(exc).__name__}: {exc}", transient=False, session_id=session_id
    )
