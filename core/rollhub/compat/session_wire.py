"""agentcore-rl-toolkit's rollout-dump and contract-error types, on rollhub's sessions.

``RolloutDumpResponse`` has upstream's fields and methods; one difference: a ``reward``
that is not a finite number (NaN, ±inf) is refused when the dump is made, naming the
field, where upstream lets it through to the trainer's advantages.
"""

from __future__ import annotations

import math
import traceback
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from rollhub.episode import ErrorInfo
from rollhub.sessions.base import SessionDump

__all__ = [
    "RolloutContractError",
    "RolloutDumpResponse",
    "describe_with_root_cause",
    "exception_to_string",
    "root_cause",
]


class RolloutContractError(ValueError):
    """A rollout that cannot be attempted or scored because the setup is wrong (the same
    on every rollout of the run); never raised for a rollout that merely failed."""


class RolloutDumpResponse(BaseModel):
    """What one rollout produced: the agent's output, reward and metrics, or its failure."""

    response_type: Literal["rollout_dump_response"] = Field(default="rollout_dump_response")
    metrics: dict[str, float] = Field(default_factory=dict)
    task_output: dict[str, Any] | None
    reward: float | None
    exception: str | None

    @field_validator("reward")
    @classmethod
    def _finite_reward(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError(
                f"reward={value!r} is not finite; a NaN or infinite reward would spoil the "
                f"advantages of its whole group: report a finite number, or an exception"
            )
        return value

    def failure_reason(self) -> str | None:
        """A one-line failure summary, or None for a successful dump."""
        if self.exception is not None:
            lines = self.exception.strip().splitlines()
            return lines[-1] if lines else "Rollout reported an empty exception"
        if self.reward is None:
            return "Rollout reported no reward and no exception"
        if self.task_output is None:
            return "Rollout reported no task output and no exception"
        return None

    def is_successful(self) -> bool:
        """Whether this dump describes a rollout whose reward may be used."""
        return self.failure_reason() is None

    def to_dump(self) -> SessionDump:
        """rollhub's form of this dump (every field kept)."""
        error = None
        if self.exception is not None:
            lines = self.exception.strip().splitlines()
            error = ErrorInfo("AgentError", lines[-1] if lines else "", self.exception)
        return SessionDump(
            result=self.task_output, reward=self.reward, metrics=dict(self.metrics), error=error
        )

    @classmethod
    def from_dump(cls, dump: SessionDump) -> RolloutDumpResponse:
        """This type's form of rollhub's dump."""
        exception = None
        if dump.error is not None:
            exception = dump.error.traceback
            if exception is None:
                exception = f"{dump.error.type}: {dump.error.message}"
        return cls(
            task_output=dump.result, reward=dump.reward, metrics=dump.metrics, exception=exception
        )


def exception_to_string(exc: BaseException) -> str:
    """``exc`` with its full traceback, as a dump's ``exception`` carries it."""
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def root_cause(exc: BaseException) -> BaseException:
    """The deepest exception of ``exc``'s cause/context chain (``exc`` when it has none)."""
    seen = {id(exc)}
    while True:
        below = exc.__cause__ or exc.__context__
        if below is None or id(below) in seen:
            return exc
        seen.add(id(below))
        exc = below


def describe_with_root_cause(exc: BaseException) -> str:
    """``exc`` in one line, naming what it was raised over when that differs."""
    root = root_cause(exc)
    one = f"{type(exc).__name__}: {' '.join(str(exc).split())}".rstrip(": ")
    if root is exc:
        return one
    return f"{one} [raised over {type(root).__name__}: {' '.join(str(root).split())}]"
