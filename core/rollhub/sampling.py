"""The sampling-backend interface: token ids in, sampled token ids and logprobs out.

The gateway renders messages to token ids itself and asks a backend (a local transformers
engine, vLLM, SGLang, Tinker) to continue them, so the ids a trainer receives are exactly
the ids the engine sampled.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from rollhub.training.step import Policy

_T = TypeVar("_T")

log = logging.getLogger(__name__)

__all__ = [
    "FINISH_REASONS",
    "Generation",
    "SamplingBackend",
    "SamplingBackendOptions",
    "SamplingParams",
    "TokenChunk",
    "TurnContext",
]


#: the values of :attr:`Generation.finish_reason`: EOS/stop id/stop string, max_tokens, aborted
FINISH_REASONS = ("stop", "length", "abort")


class SamplingBackendOptions(BaseModel):
    """Options every sampling backend accepts; backends subclass this for their own."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class SamplingParams:
    """Sampling parameters in engine-neutral form.

    ``temperature == 0`` means greedy; ``top_k <= 0`` and ``top_p == 1`` disable truncation.
    ``stop_token_ids`` and ``stop`` end a generation with ``finish_reason="stop"`` (the stop
    token stays in the output ids). ``extra`` is passed through to engines that accept extra
    fields (vLLM: the request body; SGLang: ``sampling_params``; e.g. ``ignore_eos``).
    """

    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()
    stop: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TurnContext:
    """Which model call a generation serves.

    Engines use it for sticky routing and prefix-cache reuse (a router's routing key,
    verl's ``request_id``, slime's consistent-hashing header): every turn of one session
    should land on the replica that holds its prefix.
    """

    session_id: str
    turn_index: int
    #: the policy version the gateway stamps on this turn unless the backend reports its own
    weight_version: int | None = None


@dataclass(frozen=True)
class TokenChunk:
    """Tokens the engine produced since the last chunk (streaming)."""

    token_ids: list[int]
    logprobs: list[float]


@dataclass(frozen=True)
class Generation:
    """One finished generation: exactly what the engine sampled.

    ``logprobs[i]`` belongs to ``token_ids[i]``; which distribution it refers to depends on
    the backend (docs/engines.md). ``finish_reason`` is one of :data:`FINISH_REASONS`.
    ``weight_version`` is the version of the weights that sampled it when the backend knows
    (it then wins over the gateway's own count); None leaves the gateway's version.
    """

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" | "length" | "abort"
    weight_version: int | None = None
    metrics: dict[str, Any] = field(default_factory=dict)


class SamplingBackend(ABC):
    """Continue a token-id prompt. Subclasses set ``name`` and ``Options``.

    Failures are :class:`rollhub.errors.GatewayError` (the engine's own exception as
    ``__cause__``); remote backends add the context ``unreachable`` and ``status``.
    """

    name: ClassVar[str]
    Options: ClassVar[type[SamplingBackendOptions]] = SamplingBackendOptions

    def __init__(self, options: SamplingBackendOptions | None = None, **_: object) -> None:
        self.options = options or self.Options()

    def __init_subclass__(cls, **kwargs: object) -> None:
        # Backends written before ``turn=`` existed keep working: their own generate/stream
        # get a thin wrapper that takes the keyword and drops it.
        super().__init_subclass__(**kwargs)
        for name in ("generate", "stream"):
            method = cls.__dict__.get(name)
            if method is not None and not _takes_turn(method):
                log.warning("sampling backend %s.%s does not accept turn=; it gets no session "
                            "routing context", cls.__qualname__, name)
                setattr(cls, name, _dropping_turn(method))

    async def start(self) -> None:  # noqa: B027 - optional lifecycle step
        """Load the model or open connections. Idempotent."""

    @abstractmethod
    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, *, turn: TurnContext | None = None
    ) -> Generation:
        """Sample a continuation of ``prompt_ids`` (``turn``: the call it serves, if known)."""

    async def stream(
        self, prompt_ids: list[int], params: SamplingParams, *, turn: TurnContext | None = None
    ) -> AsyncIterator[TokenChunk | Generation]:
        """Yield chunks as the engine produces them, then the final :class:`Generation`.

        Closing the iterator early aborts the engine request. The default implementation
        yields the whole generation at once; engines that can stream override it.
        """
        gen = await self.generate(prompt_ids, params, turn=turn)
        yield TokenChunk(gen.token_ids, gen.logprobs)
        yield gen

    def set_weight_version(self, version: int | None) -> None:  # noqa: B027 - optional
        """The weights this backend holds are now known as ``version``: a training step
        that changed nothing, or weights synced into the engine out of band. A backend that
        reports its own version on every :class:`Generation` takes it for the rows it
        admits from now on; the default does nothing (the gateway stamps its own)."""

    def update_policy(self, policy: Policy, weight_version: int) -> None:
        """Sample from ``policy`` from the next turn on; turns in flight keep the old one.

        Backends whose weights a trainer can hand over in process (Tinker's sampling
        client) override this; the default refuses.

        :raises UsageError: the backend cannot take a policy object.
        """
        from rollhub.errors import UsageError

        raise UsageError(
            f"sampling backend {self.name!r} cannot take a policy from the trainer; sync the "
            f"engine's weights out of band and return policy=None from the trainer's step"
        )

    async def close(self) -> None:  # noqa: B027 - optional lifecycle step
        """Release the model or connections. Idempotent."""


def _takes_turn(method: Callable[..., object]) -> bool:
    import inspect

    params = inspect.signature(method).parameters
    return "turn" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def _dropping_turn(method: Callable[..., _T]) -> Callable[..., _T]:
    import functools

    @functools.wraps(method)
    def call(self: SamplingBackend, prompt_ids: list[int], params: SamplingParams, *,
             turn: TurnContext | None = None) -> _T:
        return method(self, prompt_ids, params)

    return call
