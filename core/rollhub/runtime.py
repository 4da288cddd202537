"""The runtime interface: where agent code runs.

A runtime takes a prepared :class:`~rollhub.rollout.RolloutRequest`, starts it somewhere
(worker processes on this machine, AWS Bedrock AgentCore Runtime, a Ray cluster) and returns
at once: rollouts are fire-and-forget, and their results arrive through the result store.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from rollhub.rollout import RolloutRequest, SubmitReceipt

__all__ = ["Runtime", "RuntimeOptions", "SessionLostCallback"]

#: Called by a runtime when it knows a session can never produce a result
#: (its worker died, the service reported it gone): ``callback(session_id, reason)``.
SessionLostCallback = Callable[[str, str], None]


class RuntimeOptions(BaseModel):
    """Options every runtime accepts; runtimes subclass this for their own."""

    model_config = ConfigDict(extra="forbid")


class Runtime(ABC):
    """Submit → handle, cancel, liveness. Subclasses set ``name`` and ``Options``."""

    name: ClassVar[str]
    Options: ClassVar[type[RuntimeOptions]] = RuntimeOptions

    def __init__(self, options: RuntimeOptions | None = None, **_: Any) -> None:
        self.options = options or self.Options()
        self._on_lost: list[SessionLostCallback] = []

    def on_session_lost(self, callback: SessionLostCallback) -> None:
        """Register ``callback(session_id, reason)`` for sessions that can no longer finish."""
        self._on_lost.append(callback)

    def _report_lost(self, session_id: str, reason: str) -> None:
        for cb in list(self._on_lost):
            cb(session_id, reason)

    async def start(self) -> None:  # noqa: B027 - optional lifecycle step
        """Acquire resources (start workers, open clients). Idempotent."""

    @abstractmethod
    async def submit(self, request: RolloutRequest) -> SubmitReceipt:
        """Start one rollout and return at once.

        :raises SubmissionError: ``transient=True`` for throttling and server errors.
        """

    @abstractmethod
    async def cancel(self, session_id: str) -> None:
        """Stop a session's work (best effort; a finished session is not an error)."""

    async def close(self) -> None:  # noqa: B027 - optional lifecycle step
        """Release everything :meth:`start` acquired. Idempotent."""
