"""Tinker as the sampling backend, through the official ``tinker`` SDK.

Each generation is one ``SamplingClient.sample_async(prompt=ModelInput.from_ints(ids),
num_samples=1, sampling_params=SamplingParams(max_tokens, temperature, top_p, top_k, stop,
seed))``; ``SampleResponse.sequences[0]`` gives ``tokens``, ``logprobs`` and ``stop_reason``
(``stop``/``length``). On the wire (SDK 0.22 to 0.24) that is ``POST /api/v1/asample`` answered
with a future id, then ``POST /api/v1/retrieve_future`` until the result is ready; the SDK
also opens a session (``/api/v1/create_session``, heartbeats) and a sampling session
(``/api/v1/create_sampling_session``) once.

Logprobs are Tinker's sampler logprobs: the ones its ``importance_sampling`` loss expects as
the behaviour policy's. Tinker has no cancel call for sampling: closing a stream stops waiting
but the server finishes the sample. The SDK retries transient errors itself.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from pydantic import Field, SecretStr, model_validator
from rollhub.errors import ConfigError, GatewayError, UsageError
from rollhub.sampling import (
    Generation,
    SamplingBackend,
    SamplingBackendOptions,
    SamplingParams,
    TurnContext,
)

if TYPE_CHECKING:
    import tinker

log = logging.getLogger(__name__)

__all__ = ["TinkerBackend", "TinkerOptions"]

_FINISH = {"stop": "stop", "length": "length"}


class TinkerOptions(SamplingBackendOptions):
    """Options of the Tinker backend. ``model_path`` wins over ``base_model``."""

    base_url: str | None = Field(None, description="Tinker API root; None: the SDK's default")
    api_key: SecretStr | None = Field(None, description="'tml-...'; None: TINKER_API_KEY")
    model_path: str | None = Field(None, description="tinker:// path of sampler weights")
    base_model: str | None = Field(None, description="base model name, e.g. 'Qwen/Qwen3-8B'")
    weight_version: int | None = Field(None, description="reported on every Generation")
    from_trainer: bool = Field(
        False, description="sample only from the policy a trainer publishes (rollhub-tinker)"
    )

    @model_validator(mode="after")
    def _needs_a_model(self) -> TinkerOptions:
        if not (self.model_path or self.base_model or self.from_trainer):
            raise ValueError("set model_path (tinker://...) or base_model, or from_trainer = true")
        return self


class TinkerBackend(SamplingBackend):
    """Samples through a ``tinker.SamplingClient`` (created on :meth:`start`, or given)."""

    name = "tinker"
    Options = TinkerOptions
    options: TinkerOptions

    def __init__(
        self,
        options: TinkerOptions | None = None,
        *,
        sampling_client: tinker.SamplingClient | None = None,
        **kwargs: object,
    ) -> None:
        if options is None and sampling_client is None:
            raise ConfigError(
                "the tinker backend needs options (model_path or base_model) or a sampling_client",
                field="model_path",
            )
        if options is None:
            options = TinkerOptions(base_model="(given sampling client)")
        super().__init__(options, **kwargs)
        self.sampling_client = sampling_client
        self._owns_client = sampling_client is None
        self._service: tinker.ServiceClient | None = None
        self._lock = asyncio.Lock()

    def use_sampling_client(
        self, client: tinker.SamplingClient, weight_version: int | None = None) -> None:
        """Swap in a new sampler (e.g. from ``save_weights_and_get_sampling_client``).

        Turns already sampling finish on the client they started with and report that
        client's version; turns started after the swap use the new one.
        """
        self.sampling_client = client
        if weight_version is not None:
            self.options = self.options.model_copy(update={"weight_version": weight_version})

    def update_policy(self, policy: object, weight_version: int) -> None:
        """The trainer's new ``SamplingClient`` serves turns from now on.

        :raises UsageError: ``policy`` is not a ``tinker.SamplingClient``.
        """
        import tinker

        if not isinstance(policy, tinker.SamplingClient):
            raise UsageError(
                f"the tinker engine takes a policy as a tinker.SamplingClient, got "
                f"{type(policy).__name__}"
            )
        self.use_sampling_client(policy, weight_version)

    async def start(self) -> None:
        """Create the ServiceClient and SamplingClient (blocking SDK calls run in a thread)."""
        async with self._lock:
            if self.sampling_client is None:
                if self.options.from_trainer:
                    return  # the trainer publishes the first policy before any rollout
                self.sampling_client = await asyncio.to_thread(self._connect)

    def _connect(self) -> tinker.SamplingClient:
        import tinker

        opts = self.options
        kwargs: dict[str, Any] = {}
        if opts.base_url:
            kwargs["base_url"] = opts.base_url
        if opts.api_key is not None:
            kwargs["api_key"] = opts.api_key.get_secret_value()
        try:
            self._service = tinker.ServiceClient(**kwargs)
            return self._service.create_sampling_client(
                model_path=opts.model_path, base_model=None if opts.model_path else opts.base_model
            )
        except tinker.APIConnectionError as exc:
            raise GatewayError(
                f"tinker unreachable at {opts.base_url}: {exc}",
                engine=self.name,
                unreachable=True,
                status=None,
            ) from exc
        except tinker.TinkerError as exc:
            raise GatewayError(
                f"tinker refused the sampling client: {exc}",
                engine=self.name,
                unreachable=False,
                status=getattr(exc, "status_code", None),
            ) from exc

    def _params(self, params: SamplingParams) -> tinker.SamplingParams:
        import tinker

        if params.stop_token_ids and params.stop:
            raise GatewayError(
                "tinker takes stop ids or stop strings, not both: drop 'stop' or 'stop_token_ids'",
                engine=self.name,
            )
        stop: list[int] | list[str] | None = (
            list(params.stop_token_ids) or list(params.stop) or None
        )
        return tinker.SamplingParams(
            max_tokens=params.max_tokens,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k,
            stop=stop,
            seed=params.seed,
        )

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, *, turn: TurnContext | None = None
    ) -> Generation:
        """One ``sample_async`` call with ``num_samples=1``."""
        import tinker

        await self.start()
        if self.sampling_client is None:
            raise GatewayError(
                "the tinker backend waits for the trainer's policy (from_trainer = true) and "
                "none was published yet",
                engine=self.name,
                unreachable=False,
                status=None,
            )
        # bound once: a swap while this call samples must not relabel its tokens
        client, version = self.sampling_client, self.options.weight_version
        try:
            resp = await client.sample_async(
                prompt=tinker.ModelInput.from_ints(list(prompt_ids)),
                num_samples=1,
                sampling_params=self._params(params),
            )
        except tinker.APIConnectionError as exc:
            raise GatewayError(
                f"tinker unreachable: {exc}", engine=self.name, unreachable=True, status=None
            ) from exc
        except tinker.APIStatusError as exc:
            raise GatewayError(
                f"tinker answered HTTP {exc.status_code}: {exc.message}",
                engine=self.name,
                unreachable=False,
                status=exc.status_code,
            ) from exc
        except tinker.TinkerError as exc:
            raise GatewayError(
                f"tinker sampling failed: {exc}", engine=self.name, unreachable=False, status=None
            ) from exc
        seq = resp.sequences[0]
        tokens = [int(t) for t in seq.tokens]
        if seq.logprobs is None or len(seq.logprobs) != len(tokens):
            raise GatewayError(
                f"tinker returned {len(tokens)} tokens without matching logprobs",
                engine=self.name,
                unreachable=False,
                status=None,
            )
        reason = str(getattr(seq.stop_reason, "value", seq.stop_reason))
        if reason not in _FINISH:
            raise GatewayError(
                f"tinker returned unknown stop_reason {reason!r}",
                engine=self.name,
                unreachable=False,
                status=None,
            )
        return Generation(tokens, [float(x) for x in seq.logprobs], _FINISH[reason], version)

    async def close(self) -> None:
        """Stop the SDK session's heartbeat (the SDK's own loop thread stays, shared)."""
        service, self._service = self._service, None
        holder = getattr(service, "_session_holder", None) if service is not None else None
        if holder is not None:
            holder.close()
        if self._owns_client:
            self.sampling_client = None
