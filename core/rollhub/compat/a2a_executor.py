"""agentcore-rl-toolkit's ``RolloutAgentExecutor``: the base class A2A agents subclass.

An agent implements ``run_setup(task_input)`` and ``run_rollout(task_input) ->
RolloutDumpResponse`` (both blocking; they run in a worker thread) and optionally
``cleanup()``; serve it with bedrock-agentcore's ``build_a2a_app(executor,
ping_handler=make_ping_handler(executor))`` or rollhub's :func:`rollhub.a2a.server.a2a_app`.

Better than upstream: a cancel runs ``cleanup()`` *before* the task is reported canceled,
and ``/ping`` goes back to Healthy then (a blocking hook cannot be interrupted: cleanup is
where an agent stops its work); a dump whose reward is not finite is refused.
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from rollhub.a2a.executor import SessionExecutor
from rollhub.app.context import PingStatus
from rollhub.compat.session_wire import RolloutDumpResponse
from rollhub.sessions.base import SessionDump

__all__ = ["RolloutAgentExecutor", "make_ping_handler"]

log = logging.getLogger(__name__)


class RolloutAgentExecutor(SessionExecutor, ABC):
    """Runs ``run_setup`` then ``run_rollout`` for one A2A task each."""

    def __init__(self) -> None:
        super().__init__()

    @abstractmethod
    def run_setup(self, task_input: dict[str, Any]) -> None:
        """Prepare the environment for ``task_input`` (in a worker thread)."""

    @abstractmethod
    def run_rollout(self, task_input: dict[str, Any]) -> RolloutDumpResponse:
        """Run one rollout and return its dump (in a worker thread); failures inside go in
        the dump's ``exception``, raise only when the rollout could not be attempted."""

    def cleanup(self) -> None:
        """Best-effort teardown on cancellation (default: nothing)."""

    async def setup_task(self, task_input: dict[str, Any], session_id: str) -> None:
        await asyncio.to_thread(self.run_setup, task_input)

    async def run_task(self, task_input: dict[str, Any], session_id: str) -> SessionDump:
        dump = await asyncio.to_thread(self.run_rollout, task_input)
        if not isinstance(dump, RolloutDumpResponse):
            dump = RolloutDumpResponse.model_validate(dump)
        return dump.to_dump()

    async def cleanup_task(self, task_id: str) -> None:
        try:
            await asyncio.to_thread(self.cleanup)
        except Exception:
            log.exception("cleanup during cancel failed for task %s", task_id)

    @property
    def _working(self) -> set[str]:
        """Ids of tasks being set up or run (upstream's attribute)."""
        return set(self._work)

    def ping_status(self) -> PingStatus:
        """``HealthyBusy`` while any task is being set up or run, else ``Healthy``."""
        return super().ping_status()


def make_ping_handler(executor: RolloutAgentExecutor) -> Callable[[], object]:
    """A ``ping_handler`` reporting ``executor``'s busy state (bedrock-agentcore's
    ``PingStatus`` when that package is installed, else rollhub's, of equal values)."""

    def handler() -> object:
        status = executor.ping_status()
        try:
            from bedrock_agentcore.runtime.models import PingStatus as AgentCorePing
        except ImportError:
            return status
        return AgentCorePing(status.value)

    return handler
