"""agentcore-rl-toolkit's ``AgentCoreS3Session``: the S3 rollout contract as a session.

An unchanged ``@app.rollout_entrypoint`` agent on AgentCore is invoked once through the
compat :class:`~rollhub.compat.upstream_client.RolloutClient` and its result read from S3;
``setup`` starts the AgentCore session (a warm-up command) so the microVM's cold start
counts against setup, not the run. The task is upstream's: ``payload`` (the agent's
payload), ``group_id`` (the result key's ``input_id``) and ``llm`` (``base_url``,
``model``, ``api_key``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from rollhub.compat.session_state import SessionState
from rollhub.compat.session_wire import RolloutContractError, RolloutDumpResponse
from rollhub.compat.upstream_client import RolloutClient
from rollhub.compat.upstream_futures import RolloutFuture
from rollhub.sessions.base import check_reward, numeric_metrics

__all__ = ["AgentCoreS3Session", "get_or_create_rollout_client", "result_location", "to_dump"]

log = logging.getLogger(__name__)

MIN_ACR_SESSION_ID_LEN = 33
_CLIENTS: dict[tuple[Any, ...], RolloutClient] = {}


def result_location(rollout_output_s3: str, experiment_name: str) -> tuple[str, str]:
    """``(bucket, exp_id)`` from ``s3://bucket[/prefix]`` and an experiment name; a prefix
    is folded into ``exp_id`` (``prefix/experiment``)."""
    location = rollout_output_s3.strip().removeprefix("s3://")
    bucket, _, prefix = location.strip("/").partition("/")
    if not bucket:
        raise ValueError(f"rollout_output_s3={rollout_output_s3!r} names no bucket")
    if not experiment_name or not experiment_name.strip():
        raise ValueError(f"experiment_name={experiment_name!r} is empty")
    name = experiment_name.strip()
    return bucket, f"{prefix}/{name}" if prefix else name


def get_or_create_rollout_client(
    *,
    agentcore_runtime_arn: str,
    rollout_output_s3: str,
    experiment_name: str,
    max_pool_connections: int = 100,
) -> RolloutClient:
    """The process-wide client for this config (sessions of one config share it)."""
    bucket, exp_id = result_location(rollout_output_s3, experiment_name)
    key = (agentcore_runtime_arn, bucket, exp_id, max_pool_connections)
    client = _CLIENTS.get(key)
    if client is None:
        client = _CLIENTS[key] = RolloutClient(
            agentcore_runtime_arn, bucket, exp_id, tps_limit=10**9,
            max_pool_connections=max_pool_connections,
        )  # fmt: skip
    return client


def to_dump(result: dict[str, Any]) -> RolloutDumpResponse:
    """A stored result document as a dump: a non-200 ``status_code`` is the exception; a
    reward that is not a finite number is a contract error."""
    status = result.get("status_code")
    if status is not None and status != 200:
        reason = f"agent returned status_code={status}: {result.get('stop_reason', 'unknown')}"
        return RolloutDumpResponse(
            metrics=numeric_metrics(result.get("metrics")), task_output=result, reward=None,
            exception=reason,
        )  # fmt: skip
    try:
        reward = check_reward(result.get("rewards"), "rewards")
    except ValueError as exc:
        raise RolloutContractError(f"the agent's built-in reward is unusable: {exc}") from exc
    return RolloutDumpResponse(
        metrics=numeric_metrics(result.get("metrics")), task_output=result, reward=reward,
        exception=None,
    )  # fmt: skip


class AgentCoreS3Session:
    """One invocation of an S3-contract agent on AgentCore, as a session."""

    def __init__(self, session_id: str, session_state: SessionState, *, client: RolloutClient) -> None:
        if len(session_id) < MIN_ACR_SESSION_ID_LEN:
            raise ValueError(
                f"session_id={session_id!r} is {len(session_id)} characters; AgentCore needs "
                f"at least {MIN_ACR_SESSION_ID_LEN}: lengthen the harness's id"
            )
        self.session_id = session_id
        self.session_state = session_state
        self._client = client
        self._future: RolloutFuture | None = None
        self._started = False

    async def __aenter__(self) -> AgentCoreS3Session:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    async def setup(self, task: dict[str, Any]) -> None:
        """Start the AgentCore session with a warm-up command."""
        await self.session_state.update(
            {"runtime_arn": self._client.agent_runtime_arn,
             "result_s3_bucket": self._client.s3_bucket, "result_s3_prefix": self._client.exp_id}
        )  # fmt: skip
        self._started = True
        await asyncio.to_thread(self._warm_up)

    def _warm_up(self) -> None:
        answer = self._client.agentcore_client.invoke_agent_runtime_command(
            agentRuntimeArn=self._client.agent_runtime_arn, runtimeSessionId=self.session_id,
            contentType="application/json", accept="application/json",
            body={"command": "echo hello", "timeout": 60},
        )  # fmt: skip
        last = None
        for event in answer["stream"]:
            last = event
        stop = (last or {}).get("chunk", {}).get("contentStop", {})
        if stop.get("exitCode") != 0:
            raise RuntimeError(f"the warm-up command of session {self.session_id} failed: {last}")

    async def run(self, task: dict[str, Any]) -> RolloutDumpResponse:
        """Invoke the agent and wait for its stored result."""
        payload, group_id, llm = _payload(task), _group_id(task), _llm(task)
        self._started = True
        future = await self._client.invoke_async(
            payload, session_id=self.session_id, input_id=group_id, base_url=llm["base_url"],
            model_id=str(llm["model"]).split("/")[-1], api_key=llm["api_key"],
        )  # fmt: skip
        self._future = future
        await self.session_state.set("result_key", future.result_key)
        return to_dump(await future)

    async def shutdown(self) -> None:
        """Stop the AgentCore session (idempotent, never raises)."""
        future, self._future = self._future, None
        started, self._started = self._started, False
        try:
            if future is not None:
                await future.cancel_async()
            elif started:
                await asyncio.to_thread(
                    self._client.agentcore_client.stop_runtime_session,
                    agentRuntimeArn=self._client.agent_runtime_arn,
                    runtimeSessionId=self.session_id,
                )
        except Exception as exc:
            log.warning("stopping session %s failed: %r", self.session_id, exc)


def _payload(task: dict[str, Any]) -> dict[str, Any]:
    payload = task.get("payload")
    if not isinstance(payload, dict):
        raise RolloutContractError(
            f"the task has no `payload` dict (got {type(payload).__name__}): rows carry the "
            f"agent's exact invoke payload under `payload`"
        )
    return payload


def _group_id(task: dict[str, Any]) -> str:
    group_id = task.get("group_id")
    if group_id is None or (isinstance(group_id, str) and not group_id.strip()):
        raise RolloutContractError(f"the task has no usable `group_id` (got {group_id!r})")
    return str(group_id)


def _llm(task: dict[str, Any]) -> dict[str, Any]:
    llm = task.get("llm")
    missing = [
        k for k in ("base_url", "model", "api_key") if not isinstance(llm, dict) or not llm.get(k)
    ]
    if missing or not isinstance(llm, dict):
        raise RolloutContractError(f"the task's `llm` block is missing {missing} (got {llm!r})")
    return llm
