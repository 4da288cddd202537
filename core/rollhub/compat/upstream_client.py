"""agentcore-rl-toolkit's ``RolloutClient``: change the import, keep the script.

::

    # from agentcore_rl_toolkit import RolloutClient
    from rollhub.compat import RolloutClient

    client = RolloutClient(arn, "my-bucket", "exp1", tps_limit=25, model_id="qwen",
                           temperature=0.7)
    for item in client.run_batch(payloads, max_concurrent_sessions=10):
        if item.success:
            print(item.result["rewards"])

Everything a user observes is upstream's: ``invoke`` sends ``InvokeAgentRuntime`` before it
returns (so submission errors raise there), futures poll S3, ``_rollout`` carries the client
defaults flat, and the boto3 clients are made with this module's ``boto3`` (so
``patch("rollhub.compat.upstream_client.boto3")`` works as patching upstream's did). Calls
to the runtime share rollhub's process-wide token bucket for the ARN (the one rollhub's
``agentcore`` runtime and sandbox use). Results of rollhub-native agents are shown with
upstream's fields. rollhub's own client (:mod:`rollhub.client`) is where terminal statuses,
callbacks and resume live; see ``docs/migrating-from-agentcore-rl-toolkit.md``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from typing import Any

import boto3
from botocore.config import Config

from rollhub.compat.upstream_batch import AsyncBatchResult, BatchResult
from rollhub.compat.upstream_futures import RolloutFuture
from rollhub.submission.ratelimit import limiter_for

__all__ = ["CLIENT_OPTIONS", "RolloutClient"]

log = logging.getLogger(__name__)

#: Options of the client and batch runner; passed as ``_rollout`` fields they reach the
#: agent (as with upstream), with a warning naming where they belong.
CLIENT_OPTIONS = {
    "max_concurrent_sessions": "run_batch(payloads, max_concurrent_sessions=N)",
    "timeout": "run_batch(..., timeout=S) or future.result(timeout=S)",
    "initial_interval": "run_batch(..., initial_interval=S)",
    "max_interval": "run_batch(..., max_interval=S)",
    "backoff_factor": "run_batch(..., backoff_factor=F)",
    "log_interval": "run_batch(..., log_interval=S)",
    "tps_limit": "RolloutClient(..., tps_limit=N)",
    "max_retry_attempts": "RolloutClient(..., max_retry_attempts=N)",
    "max_pool_connections": "RolloutClient(..., max_pool_connections=N)",
}


def _warn_client_options(fields: dict[str, Any], where: str) -> None:
    for name in sorted(set(fields) & set(CLIENT_OPTIONS)):
        log.warning(
            "%s: %s= is sent to the agent as a _rollout field; as a client option pass it as %s",
            where,
            name,
            CLIENT_OPTIONS[name],
        )


class RolloutClient:
    """Submit rollouts to an AgentCore runtime and read their results from S3.

    :param agent_runtime_arn: the runtime's ARN (the region is read from it).
    :param s3_bucket: the bucket agents store results in.
    :param exp_id: experiment id, the first part of every result key.
    :param max_retry_attempts: botocore (adaptive) retry attempts per call.
    :param tps_limit: ``InvokeAgentRuntime`` + ``StopRuntimeSession`` calls per second.
    :param max_pool_connections: HTTP connections per boto3 client.
    :param base_url: model endpoint sent to agents in ``_rollout``.
    :param model_id: model name sent to agents in ``_rollout``.
    :param extra_config: more ``_rollout`` fields (e.g. ``temperature=0.7``), sent flat.
    :raises ValueError: the ARN has no region.

    Not thread-safe, as upstream's: one client per thread.
    """

    @staticmethod
    def _parse_region_from_arn(arn: str) -> str:
        """The region of ``arn:partition:service:region:account:resource``."""
        parts = arn.split(":")
        if len(parts) < 4 or not parts[3]:
            raise ValueError(f"Invalid ARN format, cannot extract region: {arn}")
        return parts[3]

    def __init__(
        self,
        agent_runtime_arn: str,
        s3_bucket: str,
        exp_id: str,
        max_retry_attempts: int = 5,
        tps_limit: int = 25,
        max_pool_connections: int = 10,
        base_url: str | None = None,
        model_id: str | None = None,
        **extra_config: object,
    ) -> None:
        _warn_client_options(extra_config, "RolloutClient()")
        self.agent_runtime_arn = agent_runtime_arn
        self.s3_bucket = s3_bucket
        self.exp_id = exp_id
        self.base_url = base_url
        self.model_id = model_id
        self.extra_config = extra_config
        self.tps_limit = tps_limit
        self.region = self._parse_region_from_arn(agent_runtime_arn)
        config = Config(
            retries={"max_attempts": max_retry_attempts, "mode": "adaptive"},
            max_pool_connections=max_pool_connections,
            user_agent_extra="rollhub-compat",
        )
        self.agentcore_client = boto3.client(
            "bedrock-agentcore", region_name=self.region, config=config
        )
        self.s3_client = boto3.client("s3", region_name=self.region, config=config)
        # Shared with rollhub's agentcore runtime: the service limits calls per ARN.
        self._rate_limiter = limiter_for(f"agentcore:{agent_runtime_arn}", float(tps_limit))

    # Submitting --------------------------------------------------------------------------

    def _parse_response(self, response: dict[str, Any]) -> dict[str, Any]:
        """The agent's JSON answer from an ``InvokeAgentRuntime`` response."""
        data: dict[str, Any] = json.loads(response["response"].read())
        return data

    def _build_full_payload(
        self, payload: dict[str, Any], input_id: str, **overrides: object
    ) -> dict[str, Any]:
        """``payload`` with ``_rollout``: required fields, then client defaults, then
        ``overrides`` (last wins)."""
        rollout: dict[str, Any] = {
            "exp_id": self.exp_id,
            "input_id": input_id,
            "s3_bucket": self.s3_bucket,
            **self.extra_config,
        }
        if self.base_url:
            rollout["base_url"] = self.base_url
        if self.model_id:
            rollout["model_id"] = self.model_id
        rollout.update(overrides)
        return {**payload, "_rollout": rollout}

    def _send(
        self, payload: dict[str, Any], session_id: str, input_id: str, **overrides: object
    ) -> dict[str, Any]:
        started = time.time()
        response = self.agentcore_client.invoke_agent_runtime(
            agentRuntimeArn=self.agent_runtime_arn,
            runtimeSessionId=session_id,
            payload=json.dumps(self._build_full_payload(payload, input_id, **overrides)),
        )
        data = self._parse_response(response)
        log.info("invoked session %s in %.1fs", session_id, time.time() - started)
        return data

    def _future(self, data: dict[str, Any], session_id: str, input_id: str) -> RolloutFuture:
        return RolloutFuture(
            s3_client=self.s3_client,
            s3_bucket=data["s3_bucket"],
            result_key=data["result_key"],
            session_id=session_id,
            input_id=input_id,
            agentcore_client=self.agentcore_client,
            agent_runtime_arn=self.agent_runtime_arn,
            rate_limiter=self._rate_limiter,
        )

    def _rate_limited_invoke(
        self, payload: dict[str, Any], session_id: str, input_id: str, **overrides: object
    ) -> RolloutFuture:
        """Wait for the rate limit, send ``InvokeAgentRuntime``, return the future."""
        self._rate_limiter.acquire_sync()
        data = self._send(payload, session_id, input_id, **overrides)
        return self._future(data, session_id, input_id)

    async def _async_rate_limited_invoke(
        self, payload: dict[str, Any], session_id: str, input_id: str, **overrides: object
    ) -> RolloutFuture:
        """:meth:`_rate_limited_invoke` without blocking the event loop."""
        await self._rate_limiter.acquire()
        data = await asyncio.to_thread(self._send, payload, session_id, input_id, **overrides)
        return self._future(data, session_id, input_id)

    def invoke(
        self,
        payload: dict[str, Any],
        session_id: str | None = None,
        input_id: str | None = None,
        **rollout_overrides: object,
    ) -> RolloutFuture:
        """Start one rollout and return its future once the runtime accepted it.

        :param rollout_overrides: ``_rollout`` fields for this call (win over defaults).
        :raises botocore.exceptions.ClientError: the runtime refused the invocation
            (access denied, throttled past the retries, unknown runtime).
        """
        _warn_client_options(rollout_overrides, "invoke()")
        session_id = session_id or str(uuid.uuid4())
        input_id = input_id or str(uuid.uuid4())
        return self._rate_limited_invoke(payload, session_id, input_id, **rollout_overrides)

    async def invoke_async(
        self,
        payload: dict[str, Any],
        session_id: str | None = None,
        input_id: str | None = None,
        **rollout_overrides: object,
    ) -> RolloutFuture:
        """Async :meth:`invoke` (the HTTP call runs in a thread)."""
        _warn_client_options(rollout_overrides, "invoke_async()")
        session_id = session_id or str(uuid.uuid4())
        input_id = input_id or str(uuid.uuid4())
        return await self._async_rate_limited_invoke(
            payload, session_id, input_id, **rollout_overrides
        )

    # Batches -----------------------------------------------------------------------------

    def run_batch(
        self,
        payloads: list[dict[str, Any]],
        max_concurrent_sessions: int,
        timeout: float = 900.0,
        initial_interval: float = 0.5,
        max_interval: float = 30.0,
        backoff_factor: float = 1.5,
        log_interval: float = 30.0,
    ) -> BatchResult:
        """Every payload once, at most ``max_concurrent_sessions`` at a time; iterate the
        result for :class:`~rollhub.compat.upstream_futures.BatchItem` in completion order."""
        return BatchResult(
            client=self,
            payloads=payloads,
            max_concurrent=max_concurrent_sessions,
            timeout=timeout,
            initial_interval=initial_interval,
            max_interval=max_interval,
            backoff_factor=backoff_factor,
            log_interval=log_interval,
        )

    def run_batch_async(
        self,
        payloads: list[dict[str, Any]],
        max_concurrent_sessions: int,
        timeout: float = 900.0,
        initial_interval: float = 0.5,
        max_interval: float = 30.0,
        backoff_factor: float = 1.5,
        log_interval: float = 30.0,
    ) -> AsyncBatchResult:
        """:meth:`run_batch` for ``async for``."""
        return AsyncBatchResult(
            client=self,
            payloads=payloads,
            max_concurrent=max_concurrent_sessions,
            timeout=timeout,
            initial_interval=initial_interval,
            max_interval=max_interval,
            backoff_factor=backoff_factor,
            log_interval=log_interval,
        )

    def close(self) -> None:
        """Close the boto3 clients' connections (upstream's client has no ``close``)."""
        for client in (self.agentcore_client, self.s3_client):
            closer = getattr(client, "close", None)
            if callable(closer):
                closer()
