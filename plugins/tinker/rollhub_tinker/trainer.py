"""The ``tinker`` trainer: RL steps on the Tinker API, driven by rollhub's training loop.

Per step: the batch's trainable episodes become Datums (:mod:`rollhub_tinker.datums`),
``forward_backward`` runs the configured RL loss (``importance_sampling``, ``ppo`` or
``cispo``) on them, ``optim_step`` applies Adam, and ``save_weights_and_get_sampling_client``
returns the sampler of the new weights. The loop publishes that client to the gateway's
``tinker`` sampling backend, so the next turns are sampled by the new policy and tagged
with the new version; turns in flight finish on the old client.

Works against the hosted service (``TINKER_API_KEY``) and any Tinker-compatible server
(``base_url``), e.g. ``rollhub tinker-local serve`` on a CPU machine.

Example ``rollhub.toml``::

    [token_source]
    name = "gateway"
    model = "smollm2-135m-instruct"
    engine = { name = "tinker", options = { from_trainer = true } }

    [trainer]
    name = "tinker"
    base_url = "http://127.0.0.1:8001"
    base_model = "/path/to/base-model"
    lora_rank = 8
    learning_rate = 1e-3
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import Field, SecretStr, ValidationInfo, field_validator
from rollhub.errors import ConfigError
from rollhub.registry import ComponentContext
from rollhub.training import PolicyTrainer, StepResult, TrainerOptions, TrainingBatch

from rollhub_tinker.calls import TinkerTrainingError, guarded_call
from rollhub_tinker.datums import episode_datums, to_tinker
from rollhub_tinker.losses import loss_metrics

if TYPE_CHECKING:
    import tinker

    from rollhub_tinker.local_server import LocalTinkerServer

T = TypeVar("T")

__all__ = ["TinkerTrainer", "TinkerTrainerOptions", "TinkerTrainingError"]

log = logging.getLogger(__name__)


#: the ``loss_fn_config`` keys each RL loss takes (Tinker's ratio bounds, e.g. 0.8 and 1.2)
LOSS_FN_CONFIG_KEYS: dict[str, frozenset[str]] = {
    "importance_sampling": frozenset(),
    "ppo": frozenset({"clip_low_threshold", "clip_high_threshold"}),
    "cispo": frozenset({"clip_low_threshold", "clip_high_threshold"}),
}


class TinkerTrainerOptions(TrainerOptions):
    """``[trainer]`` options of the ``tinker`` trainer."""

    base_url: str | None = Field(None, description="Tinker API root; None: the hosted service")
    local_server: bool = Field(
        False,
        description="start rollhub's Tinker-compatible server on this machine for the run "
        "(tinker-local: set up on first use, health-checked, stopped when the run ends)",
    )
    api_key: SecretStr | None = Field(None, description="None: TINKER_API_KEY, else a dummy key")
    base_model: str | None = Field(
        None, description="base model name; None: the server's only model (self-hosted servers)"
    )
    lora_rank: int = Field(32, ge=1, description="LoRA rank")
    seed: int | None = Field(
        None, description="LoRA initialisation seed; None: experiment.seed (a server-drawn "
        "one when the trainer is built without a config)"
    )
    loss_fn: Literal["importance_sampling", "ppo", "cispo"] = Field(
        "importance_sampling", description="RL loss on the Tinker side"
    )
    loss_fn_config: dict[str, float] = Field(
        default_factory=dict,
        description="ppo/cispo: clip_low_threshold, clip_high_threshold (bounds of the "
        "ratio, e.g. 0.8 and 1.2); importance_sampling takes none",
    )
    learning_rate: float = Field(1e-5, gt=0)
    beta1: float = Field(0.9, ge=0, lt=1)
    beta2: float = Field(0.95, ge=0, lt=1)
    eps: float = Field(1e-12, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    grad_clip_norm: float = Field(0.0, ge=0, description="0: no clipping")
    max_length: int | None = Field(
        None, ge=2, description="tokens per Datum; longer records are cut (and counted)"
    )
    name: str = Field("rollhub", description="prefix of saved states")
    request_timeout_s: float | None = Field(
        1800.0, gt=0,
        description="the longest one Tinker call may take (creating the training client, "
        "forward_backward, optim_step, a save or load) before the run stops with an error; "
        "None: wait as long as the SDK does (forever for a dead server)",
    )

    @field_validator("loss_fn_config")
    @classmethod
    def _config_fits_loss(cls, value: dict[str, float], info: ValidationInfo) -> dict[str, float]:
        loss_fn = info.data.get("loss_fn")
        if loss_fn not in LOSS_FN_CONFIG_KEYS:
            return value  # loss_fn itself failed and is reported
        allowed = LOSS_FN_CONFIG_KEYS[loss_fn]
        unknown = sorted(set(value) - allowed)
        if unknown and not allowed:
            raise ValueError(
                f"loss_fn = {loss_fn!r} takes no loss_fn_config (got {unknown}); drop it, or "
                f"use loss_fn = 'ppo' or 'cispo' for clip thresholds"
            )
        if unknown:
            raise ValueError(
                f"unknown keys {unknown} for loss_fn = {loss_fn!r}; it takes "
                f"{sorted(allowed)} (bounds of the sampler-to-learner ratio, e.g. 0.8 and 1.2)"
            )
        low = value.get("clip_low_threshold", 0.0)
        high = value.get("clip_high_threshold", 1.0)
        if not 0 <= low <= 1 <= high:
            raise ValueError(
                f"clip_low_threshold = {low:g}, clip_high_threshold = {high:g}: the thresholds "
                f"bound the ratio itself, so 0 <= low <= 1 <= high (e.g. 0.8 and 1.2, not "
                f"PPO's epsilon 0.2)"
            )
        return value


class TinkerTrainer(PolicyTrainer):
    """RL training on a Tinker training client (LoRA)."""

    name = "tinker"
    Options = TinkerTrainerOptions
    options: TinkerTrainerOptions
    policies_refusal = (
        "the tinker trainer and the gateway's tinker engine share one Tinker service session "
        "and one sampling client; a training and a sampling client per policy are not wired"
    )

    def __init__(self, options: TinkerTrainerOptions | None = None, *,
                 context: ComponentContext | None = None, run_dir: Path | None = None,
                 exp_id: str | None = None, **kw: object) -> None:
        super().__init__(options, context=context, run_dir=run_dir, exp_id=exp_id, **kw)
        self.base_model: str | None = self.options.base_model
        self.service: Any = None
        self._rest_client: Any = None
        self.training_client: Any = None
        self.sampling_client: tinker.SamplingClient | None = None
        self.steps_done = 0
        self.server: LocalTinkerServer | None = None  # the one this trainer started
        config = self.context.config
        #: the LoRA initialisation seed sent to the service; an unseeded LoRA would make two
        #: runs of one config train from different initial adapters
        self.lora_seed: int | None = (
            self.options.seed if self.options.seed is not None or config is None
            else config.experiment.seed
        )

    async def start(self) -> None:
        """Connect and create the LoRA training client."""
        import tinker

        opts = self.options
        if opts.local_server:
            if opts.base_url:
                raise ConfigError(
                    "trainer.local_server starts a server of its own; drop trainer.base_url "
                    "(or set local_server = false to use the server at base_url)",
                    field="trainer.local_server",
                )
            opts = self.options = opts.model_copy(update={"base_url": await self._start_server()})
        key = opts.api_key.get_secret_value() if opts.api_key else os.environ.get("TINKER_API_KEY")
        if key is None and opts.base_url is None:
            raise ConfigError(
                "the hosted Tinker service needs an API key: set TINKER_API_KEY or trainer.api_key "
                "(or trainer.base_url for a self-hosted server)",
                field="trainer.api_key",
            )
        kwargs: dict[str, Any] = {"api_key": key or "tml-local"}
        if opts.base_url:
            kwargs["base_url"] = opts.base_url
        try:
            self.service = await self._call(
                "ServiceClient", asyncio.to_thread(lambda: tinker.ServiceClient(**kwargs))
            )
            self.base_model = opts.base_model or await self._only_model()
            self.training_client = await self._call(
                f"create_lora_training_client(base_model={self.base_model!r}, "
                f"rank={opts.lora_rank}) (check trainer.base_model and trainer.lora_rank)",
                self.service.create_lora_training_client_async(
                    base_model=self.base_model, rank=opts.lora_rank, seed=self.lora_seed
                ),
            )
        except BaseException:
            if self.server is not None:  # the server this trainer started goes with it
                await self.close()
            raise

    async def _start_server(self) -> str:
        """Set up (first use) and start ``tinker-local`` with its state in the run
        directory, so a resumed run finds its saved states; its URL."""
        from rollhub_tinker.local_server import LocalTinkerServer

        state = (self.run_dir or Path.cwd()) / "tinker-local"
        self.server = LocalTinkerServer(state_dir=state, max_lora_rank=max(8, self.options.lora_rank))
        print(f"starting the local Tinker server (state in {state}; the first use sets up "
              f"its environment, a few minutes)", flush=True)
        url = await asyncio.to_thread(self.server.start)
        log.info("tinker-local server pid %s ready at %s", self.server.pid, url)
        return str(url)

    async def _only_model(self) -> str:
        caps = await self._call(
            "get_server_capabilities", self.service.get_server_capabilities_async()
        )
        names = [m.model_name for m in caps.supported_models if m.model_name]
        if len(names) != 1:
            raise ConfigError(
                f"trainer.base_model is not set and the server offers {len(names)} models "
                f"({', '.join(names) or 'none'}); name one",
                field="trainer.base_model",
            )
        return names[0]

    async def initial_policy(self) -> tinker.SamplingClient:
        """The sampler of the current weights (the base model's, or the resumed state's)."""
        sampler: tinker.SamplingClient = await self._call(
            "save_weights_and_get_sampling_client",
            self.training_client.save_weights_and_get_sampling_client_async(),
        )
        self.sampling_client = sampler
        return sampler

    async def step(self, batch: TrainingBatch) -> StepResult:
        """forward_backward + optim_step on the batch; the new sampler as the policy."""
        import tinker

        arrays, stats = episode_datums(batch.trainable(), max_length=self.options.max_length)
        metrics: dict[str, Any] = {**stats.as_metrics()}
        # unchanged weights are republished under the new version, so turns are not
        # reported as sampled by an older policy than the one being trained
        policy = self.sampling_client
        if arrays:
            fut = await self._call(
                "forward_backward",
                self.training_client.forward_backward_async(
                    [to_tinker(a) for a in arrays], self.options.loss_fn,
                    self.options.loss_fn_config or None,
                ),
            )
            out = await self._call("forward_backward", fut.result_async())
            metrics.update(loss_metrics(arrays, out, self.options.loss_fn,
                                        self.options.loss_fn_config))
            adam = tinker.AdamParams(
                learning_rate=self.options.learning_rate, beta1=self.options.beta1,
                beta2=self.options.beta2, eps=self.options.eps,
                weight_decay=self.options.weight_decay, grad_clip_norm=self.options.grad_clip_norm,
            )
            fut = await self._call("optim_step", self.training_client.optim_step_async(adam))
            await self._call("optim_step", fut.result_async())
            policy = self.sampling_client = await self._call(
                "save_weights_and_get_sampling_client",
                self.training_client.save_weights_and_get_sampling_client_async(),
            )
        else:
            log.info("step %d: no episode with a nonzero advantage; weights unchanged", batch.step)
        self.steps_done += 1
        return StepResult(batch.weight_version + 1, metrics, policy)

    async def save_state(self, directory: Path) -> dict[str, Any]:
        """``save_state`` on the service (weights + optimizer); the path is the state."""
        name = f"{self.options.name}-{self.run_dir.name if self.run_dir else 'run'}-{self.steps_done:06d}"
        fut = await self._call("save_state", self.training_client.save_state_async(name))
        resp = await self._call("save_state", fut.result_async())
        (directory / "tinker_path.txt").write_text(resp.path)
        return {"tinker_path": resp.path, "steps_done": self.steps_done}

    async def load_state(self, directory: Path, state: dict[str, Any]) -> None:
        """``load_state_with_optimizer`` from the path :meth:`save_state` recorded."""
        path = state.get("tinker_path")
        if not path:
            raise TinkerTrainingError(f"checkpoint {directory} has no tinker_path", call="load_state")
        # the service must still hold the state: a server's checkpoints directory (RUN_DIR/
        # tinker-local with local_server) or, on hosted Tinker, a state not yet expired
        what = f"load_state_with_optimizer({path!r}) for checkpoint {directory}"
        fut = await self._call(what, self.training_client.load_state_with_optimizer_async(path))
        await self._call(what, fut.result_async())
        self.steps_done = int(state.get("steps_done", 0))

    async def drop_state(self, state: dict[str, Any]) -> None:
        """Delete a deleted checkpoint's ``save_state`` from the service, which would keep
        it (hosted Tinker until it expires). A 404 frees nothing and stops nothing: the
        state is gone already, or the service deletes none (the local skyrl server, whose
        states are a few MB under its ``checkpoints`` directory).

        :raises TinkerTrainingError: the service refused or failed otherwise (the core
            logs it and goes on).
        """
        import tinker

        path = state.get("tinker_path")
        if not path or self.service is None:
            return
        if self._rest_client is None:  # the SDK builds it with a blocking round trip: once
            self._rest_client = await self._call(
                "create_rest_client", asyncio.to_thread(self.service.create_rest_client)
            )
        rest = self._rest_client
        try:
            await self._call(f"delete_checkpoint({path!r})",
                             rest.delete_checkpoint_from_tinker_path_async(path))
        except TinkerTrainingError as exc:
            if not isinstance(exc.__cause__, tinker.NotFoundError):
                raise
            log.info("%s stays: the service holds no such state or deletes none (404)", path)
            return
        log.info("%s deleted from the service (training.keep_checkpoints)", path)

    async def close(self) -> dict[str, Any]:
        """Stop the SDK session's heartbeat, and the SDK's REST client if one was made."""
        for name in ("_session_holder", "_rest_holder"):
            holder = getattr(self.service, name, None)
            if holder is not None:
                holder.close()
        if self.server is not None:
            server, self.server = self.server, None
            await asyncio.to_thread(server.stop)
        return {"steps": self.steps_done}

    async def _call(self, what: str, awaitable: Awaitable[T]) -> T:
        """One SDK call, bounded and typed (:func:`~rollhub_tinker.calls.guarded_call`)."""
        return await guarded_call(
            what, awaitable, service=self.options.base_url or "the hosted Tinker service",
            timeout_s=self.options.request_timeout_s, server=self.server,
        )
