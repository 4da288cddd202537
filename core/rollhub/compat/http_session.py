"""agentcore-rl-toolkit's ``AgentCoreHttpSession``: one rollout over the Runtime HTTP
contract, through a shared :class:`~rollhub.compat.runtime_client.AgentCoreHttpClient`.

``setup`` does nothing (the first invocation creates the session); ``run`` starts a
background invocation with the task as payload and waits for its result: a dict whose
``reward`` and ``metrics`` fill the dump (an ``InvocationError`` becomes the dump's
exception); ``shutdown`` stops the session once, logging (never raising) a failure.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from rollhub.compat.runtime_client import AgentCoreHttpClient, InvocationError
from rollhub.compat.session_state import SessionState
from rollhub.compat.session_wire import (
    RolloutContractError,
    RolloutDumpResponse,
    exception_to_string,
)
from rollhub.sessions.base import check_reward, numeric_metrics

__all__ = ["AgentCoreHttpSession", "to_dump"]

log = logging.getLogger(__name__)


class AgentCoreHttpSession:
    """One Runtime session; the caller owns the client and the payload."""

    def __init__(
        self, session_id: str, *, client: AgentCoreHttpClient, session_state: SessionState | None = None
    ) -> None:
        self.session_id = session_id
        self._client = client
        self._session_state = session_state
        self._started = False

    async def __aenter__(self) -> AgentCoreHttpSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    async def setup(self, task: dict[str, Any]) -> None:
        """Nothing to prepare: the first invocation creates the session."""

    async def run(self, task: dict[str, Any]) -> RolloutDumpResponse:
        """Invoke the agent with ``task`` in the background and wait for its result."""
        invocation_id = uuid.uuid4().hex
        if self._session_state is not None:
            await self._session_state.update(
                {"runtime_arn": self._client.runtime_arn, "invocation_id": invocation_id}
            )
        self._started = True  # a failed submission may still have created the session
        try:
            handle = await self._client.invoke(
                task, session_id=self.session_id, invocation_id=invocation_id, background=True
            )
            result = await handle.result()
        except InvocationError as exc:
            return RolloutDumpResponse(
                task_output=None, reward=None, exception=exception_to_string(exc)
            )
        return to_dump(result)

    async def shutdown(self) -> None:
        """Stop the session once; a failure is logged, never raised over the result."""
        if self._started:
            self._started = False
            try:
                await self._client.stop_session(self.session_id)
            except Exception:
                log.warning("stopping runtime session %s failed", self.session_id, exc_info=True)


def to_dump(result: object) -> RolloutDumpResponse:
    """An invocation's result dict as a dump (``reward`` must be a finite number)."""
    if not isinstance(result, dict):
        raise RolloutContractError("an HTTP rollout must return a JSON object")
    try:
        reward = check_reward(result.get("reward"), "reward")
    except ValueError as exc:
        raise RolloutContractError(str(exc)) from exc
    return RolloutDumpResponse(
        task_output=result, reward=reward, metrics=numeric_metrics(result.get("metrics")),
        exception=None,
    )  # fmt: skip
