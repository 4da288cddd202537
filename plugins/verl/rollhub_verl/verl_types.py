"""What rollhub calls on verl's objects (verl is typed as a missing import here).

verl hands the agent loop its server client (``LLMServerClient``), whose ``generate``
returns a ``TokenOutput``, and its Hydra config; these protocols name the attributes
rollhub uses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

__all__ = ["ServerClient", "TokenOutput", "VerlConfig"]


class TokenOutput(Protocol):
    """verl's ``TokenOutput``: one generation of the rollout server."""

    @property
    def token_ids(self) -> Sequence[int]:
        """The sampled token ids."""
        ...

    @property
    def log_probs(self) -> Sequence[float] | None:
        """The logprob of each sampled token (None: not asked for)."""
        ...

    @property
    def stop_reason(self) -> str | None:
        """Why generation stopped (``aborted``, ...)."""
        ...

    @property
    def num_preempted(self) -> int | None:
        """How often the request was preempted."""
        ...

    @property
    def extra_fields(self) -> Mapping[str, Any] | None:
        """Server extras (``global_steps``, ``num_cached_tokens``, ...)."""
        ...


class ServerClient(Protocol):
    """verl's ``LLMServerClient``: the worker's handle on the rollout servers."""

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
        **kwargs: object,
    ) -> TokenOutput:
        """Generate from ``prompt_ids`` (requests of one ``request_id`` share a server)."""
        ...


class ModelConfig(Protocol):
    """``actor_rollout_ref.model`` of verl's config (an omegaconf ``DictConfig``)."""

    @property
    def path(self) -> str:
        """The model's path or hub id."""
        ...

    def get(self, key: str) -> object:
        """A key's value, None when unset."""
        ...


class ActorRolloutRefConfig(Protocol):
    """``actor_rollout_ref`` of verl's config."""

    @property
    def model(self) -> ModelConfig:
        """The model section."""
        ...


class VerlConfig(Protocol):
    """verl's trainer config, as the agent loop reads it."""

    @property
    def actor_rollout_ref(self) -> ActorRolloutRefConfig:
        """The actor/rollout/reference section."""
        ...
