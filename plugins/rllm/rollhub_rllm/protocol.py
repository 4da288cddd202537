"""rLLM's remote-runtime types: rLLM's own classes when installed, else field-identical mirrors.

rLLM (``rllm.engine.remote_runtime.protocol`` and ``rllm.workflows.workflow``) is not on
PyPI. When it is importable, :func:`rllm_types` returns its classes, so the trainer gets
exactly the objects it defines. Otherwise the mirrors below stand in: the same dataclass
fields, defaults and enum values as :mod:`rollhub_rllm.contract` records for the pinned
commit (a test compares them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

__all__ = [
    "RemoteTaskResult",
    "Submission",
    "TaskResult",
    "TaskSubmission",
    "TerminationReason",
    "rllm_types",
    "termination_value",
]


class TerminationReason(Enum):
    """Mirror of ``rllm.workflows.workflow.TerminationReason``."""

    MAX_PROMPT_LENGTH_EXCEEDED = "max_prompt_length_exceeded"
    MAX_RESPONSE_LENGTH_EXCEEDED = "max_response_length_exceeded"
    ENV_DONE = "env_done"
    MAX_TURNS_EXCEEDED = "max_turns_exceeded"
    TIMEOUT = "timeout"
    UNKNOWN = "unknown"
    ERROR = "error"


@dataclass
class TaskSubmission:
    """Mirror of rLLM's ``TaskSubmission``: one task for a remote runtime."""

    task: dict
    session_id: str
    task_id: str  # the GRPO group key
    inference_url: str  # the session's rllm-model-gateway URL


@dataclass
class RemoteTaskResult:
    """Mirror of rLLM's ``RemoteTaskResult``: one per submission."""

    finished: bool
    session_id: str
    task_id: str = ""
    reward: float | None = None
    error: str | None = None
    termination_reason: TerminationReason | None = None
    elapsed: float = 0.0
    raw_result: dict[str, Any] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


class Submission(Protocol):
    """What rollhub reads of a ``TaskSubmission`` (rLLM's, or the mirror)."""

    @property
    def task(self) -> Mapping[str, Any]:
        """The task row."""
        ...

    @property
    def session_id(self) -> str:
        """rLLM's session id."""
        ...

    @property
    def task_id(self) -> str:
        """The GRPO group key."""
        ...

    @property
    def inference_url(self) -> str:
        """The session's rllm-model-gateway URL."""
        ...


class TaskResult(Protocol):
    """A ``RemoteTaskResult`` (rLLM's, or the mirror), as rollhub hands it back."""

    @property
    def finished(self) -> bool:
        """Whether the task reached a terminal result."""
        ...

    @property
    def session_id(self) -> str:
        """The submission's session id."""
        ...


#: ``(RemoteTaskResult, TerminationReason)``; rLLM's enum has the mirror's members.
RllmTypes = tuple[Callable[..., TaskResult], type[TerminationReason]]


def rllm_types() -> RllmTypes:
    """``(RemoteTaskResult, TerminationReason)``: rLLM's own when importable, else the mirrors."""
    try:
        from rllm.engine.remote_runtime.protocol import RemoteTaskResult as Result
        from rllm.workflows.workflow import TerminationReason as Reason
    except ImportError:
        return RemoteTaskResult, TerminationReason
    return Result, Reason


def termination_value(status: str, result: Mapping[str, Any] | None = None) -> str:
    """rLLM's termination reason (its value) for a rollhub outcome.

    ``ok`` is ``env_done`` unless the agent's result names another valid reason
    (``termination_reason``); ``timeout`` is ``timeout``; every failure is ``error``.
    """
    if status == "ok":
        declared = (result or {}).get("termination_reason")
        values = {r.value for r in TerminationReason}
        return declared if isinstance(declared, str) and declared in values else "env_done"
    return "timeout" if status == "timeout" else "error"
