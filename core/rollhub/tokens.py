"""The token-source interface: where exact token ids and logprobs of a rollout come from.

A token source opens a capture session before a rollout is submitted (the agent gets a
``base_url`` and an ``api_key`` for it) and returns the session's
:class:`~rollhub.trace.TraceRecord`s when the rollout is done.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from rollhub.trace import TraceRecord

if TYPE_CHECKING:
    from rollhub.rollout import RolloutConfig
    from rollhub.training.step import Policy

__all__ = ["CaptureSession", "NoTokenSource", "TokenSource", "TokenSourceOptions"]


class TokenSourceOptions(BaseModel):
    """Options every token source accepts; sources subclass this for their own."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class CaptureSession:
    """What an agent needs to talk to the model through a capture session."""

    session_id: str
    base_url: str | None
    api_key: str | None
    model_id: str | None
    extra: dict[str, Any] = field(default_factory=dict)
    #: policy name → model name, when the session serves several policies
    models: dict[str, str] = field(default_factory=dict)

    def apply_to(self, rollout: RolloutConfig) -> None:
        """Point a rollout's model endpoint at this session (what the agent will call)."""
        if self.base_url is not None:
            rollout.base_url = self.base_url
        if self.api_key is not None:
            rollout.api_key = SecretStr(self.api_key)
        if self.model_id is not None:
            rollout.model_id = self.model_id
        if self.models:
            rollout.models = dict(self.models)


class TokenSource(ABC):
    """Open sessions, fetch their traces, close them. Subclasses set ``name``/``Options``."""

    name: ClassVar[str]
    Options: ClassVar[type[TokenSourceOptions]] = TokenSourceOptions

    def __init__(self, options: TokenSourceOptions | None = None, **_: object) -> None:
        self.options = options or self.Options()
        self.weight_version: int | None = None

    async def start(self) -> None:  # noqa: B027 - optional lifecycle step
        """Acquire resources (start the gateway, open clients). Idempotent."""

    @abstractmethod
    async def open_session(
        self, session_id: str, *, sampling: dict[str, Any] | None = None
    ) -> CaptureSession:
        """Open a capture session for one rollout."""

    @abstractmethod
    async def fetch_traces(self, session_id: str) -> list[TraceRecord]:
        """Every trace the session recorded, complete (never a partial read)."""

    @abstractmethod
    async def close_session(self, session_id: str, *, drop: bool = False) -> None:
        """Finish (or, with ``drop``, discard) a session."""

    def set_weight_version(self, version: int | None) -> None:
        """The policy version that new model calls are served by."""
        self.weight_version = version

    async def publish_policy(self, policy: Policy, version: int) -> None:
        """Swap the sampling side to ``policy`` (a trainer's new weights), as ``version``.

        :raises UsageError: this token source does not sample itself, so it cannot take a
            policy (point the agents' engine at the new weights instead).
        """
        from rollhub.errors import UsageError

        raise UsageError(
            f"token source {self.name!r} cannot take a new policy from the trainer; use a "
            f"token source whose sampling backend the trainer feeds (e.g. 'gateway')"
        )

    async def close(self) -> None:  # noqa: B027 - optional lifecycle step
        """Release everything :meth:`start` acquired. Idempotent."""


class NoTokenSourceOptions(TokenSourceOptions):
    """Where agents send model calls when nothing captures tokens (evaluation only)."""

    base_url: str | None = Field(None, description="OpenAI-compatible endpoint for the agents")
    model_id: str | None = Field(None, description="model name to use at base_url")
    api_key: SecretStr | None = Field(None, description="key for base_url")


class NoTokenSource(TokenSource):
    """No token capture: agents call the configured endpoint directly; no traces (eval)."""

    name = "none"
    Options = NoTokenSourceOptions
    options: NoTokenSourceOptions

    async def open_session(
        self, session_id: str, *, sampling: dict[str, Any] | None = None
    ) -> CaptureSession:
        """The configured endpoint, the same for every session."""
        key = self.options.api_key.get_secret_value() if self.options.api_key else None
        return CaptureSession(session_id, self.options.base_url, key, self.options.model_id)

    async def fetch_traces(self, session_id: str) -> list[TraceRecord]:
        """Nothing was captured: no traces."""
        return []

    async def close_session(self, session_id: str, *, drop: bool = False) -> None:
        """Nothing to close."""
        return None
