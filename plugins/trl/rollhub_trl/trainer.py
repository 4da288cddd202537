"""The ``trl`` trainer: TRL's ``GRPOTrainer`` drives, rollhub supplies the episodes.

``rollhub run`` starts the hub (agent workers, result store, the in-process gateway) and
awaits :meth:`TrlTrainer.drive`, which runs ``GRPOTrainer.train()`` on a thread:

- TRL's dataset is the config's ``experiment.dataset`` (each row as JSON text in the
  ``prompt`` column); TRL samples and shuffles it (``seed = experiment.seed``);
- its ``rollout_func`` (:class:`rollhub_trl.rollout.HubRollout`) runs one group of
  ``experiment.n_samples`` episodes per prompt through the hub and returns their exact ids,
  logprobs and ``env_mask``; its reward function returns the episodes' rewards;
- one optimizer step per ``training.batch_groups`` prompts (``per_device_train_batch_size
  = n_samples``, ``gradient_accumulation_steps = batch_groups``), ``training.steps`` steps;
- on the CPU the gateway's ``transformers`` engine samples from TRL's model itself (the
  module is published to the engine once; no copy). After each optimizer step the weight
  version becomes TRL's ``global_step`` and is published again, so the next turns are
  stamped with it and the engine drops key/value states of the old weights;
- each step is recorded like the core loop's: ``metrics.jsonl`` (rollhub's batch figures
  plus TRL's logs: ``loss``, ``grad_norm``, ``trl_*``), ``episodes.jsonl`` with TRL's own
  advantage per episode, the metric sinks and the progress bar;
- TRL trains on the core's advantages (``[training] advantage``, the same estimate the
  ``torch`` and ``tinker`` trainers use), and each step reports how far the learner's
  logprobs of the sampled tokens are from the engine's (``sampler_learner_kl``); both are
  the work of the ``GRPOTrainer`` subclass in :mod:`rollhub_trl.grpo_trainer`.

With ``use_vllm = true`` (a GPU machine), TRL's vLLM generates behind the gateway's vLLM
engine and TRL syncs its weights itself; only the version is published here.

``--resume`` continues from TRL's newest checkpoint, with the hub's episode-seed rounds
kept in it (:mod:`rollhub_trl.resume`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import Field, field_validator
from rollhub.config import RollhubConfig
from rollhub.errors import ConfigError
from rollhub.registry import ComponentContext
from rollhub.training import DrivenRun, LoopDriver, TrainerOptions
from rollhub.training.checkpoint import restore_seed_rounds, save_seed_rounds

from rollhub_trl.grpo_trainer import grpo_trainer_class as _grpo_trainer_class
from rollhub_trl.resume import OUTPUT_DIR, checkpoint_folder, checkpoint_step, resume_checkpoint
from rollhub_trl.rollout import HubRollout, as_prompt, rollhub_reward

if TYPE_CHECKING:
    from transformers import (
        PreTrainedModel,
        PreTrainedTokenizerBase,
        TrainerCallback,
        TrainerControl,
        TrainerState,
        TrainingArguments,
    )
    from trl import GRPOConfig, GRPOTrainer

T = TypeVar("T")

__all__ = ["RESERVED_ARGS", "TrlTrainer", "TrlTrainerOptions"]


def _checkpointing_field() -> str:
    """transformers 5 renamed ``gradient_checkpointing`` to ``activation_checkpointing``."""
    import dataclasses

    from transformers import TrainingArguments

    names = {f.name for f in dataclasses.fields(TrainingArguments)}
    return "activation_checkpointing" if "activation_checkpointing" in names else (
        "gradient_checkpointing"
    )

log = logging.getLogger(__name__)

#: GRPOConfig fields rollhub sets from the config (the error names where they live)
RESERVED_ARGS = {
    "num_generations": "experiment.n_samples",
    "per_device_train_batch_size": "experiment.n_samples",
    "gradient_accumulation_steps": "training.batch_groups",
    "steps_per_generation": "training.batch_groups",
    "max_steps": "training.steps",
    "save_total_limit": "training.keep_checkpoints",
    "shuffle_dataset": "training.shuffle",
    "seed": "experiment.seed",
    "temperature": "experiment.sampling.temperature",
    "output_dir": "the run directory",
    "learning_rate": "trainer.learning_rate",
    "use_vllm": "trainer.use_vllm",
    "logging_steps": "rollhub (every step is recorded)",
    "scale_rewards": "training.advantage (TRL trains on the core's advantages)",
}


class TrlTrainerOptions(TrainerOptions):
    """``[trainer]`` options of the ``trl`` trainer; ``[trainer.args]`` passes the rest of
    TRL's ``GRPOConfig`` through (``loss_type``, ``beta`` — TRL's KL penalty to the
    reference model —, ``epsilon``, ``max_grad_norm``, ``weight_decay``, ...)."""

    model: str | None = Field(
        None,
        description="'smollm2-135m-instruct' or a local model directory; None: the gateway "
        "engine's model",
    )
    learning_rate: float = Field(1e-5, ge=0, description="0 trains nothing (a control run)")
    train_layers: int | None = Field(
        8, ge=1,
        description="train the top N decoder layers and the final norm (None: every parameter)",
    )
    use_vllm: bool = Field(
        False, description="GPU: TRL's vLLM generates (behind the gateway's vllm engine)"
    )
    threads: int | None = Field(
        None, ge=1, description="torch intra-op threads of training (None: every core)"
    )
    args: dict[str, Any] = Field(
        default_factory=dict, description="more GRPOConfig fields, passed to TRL as given"
    )

    @field_validator("args")
    @classmethod
    def _not_rollhubs(cls, args: dict[str, Any]) -> dict[str, Any]:
        reserved = sorted(set(args) & set(RESERVED_ARGS))
        if reserved:
            key = reserved[0]
            raise ValueError(f"{key} is set by rollhub from {RESERVED_ARGS[key]}; set it there")
        if args.get("num_iterations", 1) != 1:
            raise ValueError(
                "num_iterations must be 1: rollhub records one step per generation batch"
            )
        if args:  # said at config check, not once TRL builds its config after the run starts
            import dataclasses
            import difflib

            from trl import GRPOConfig

            fields = [f.name for f in dataclasses.fields(GRPOConfig)]
            for key in sorted(set(args) - set(fields)):
                close = difflib.get_close_matches(key, fields, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ValueError(f"{key} is not a field of TRL's GRPOConfig{hint}")
        return args


class TrlTrainer(LoopDriver):
    """TRL's GRPOTrainer, driving; see the module doc."""

    name = "trl"
    Options = TrlTrainerOptions
    options: TrlTrainerOptions
    policies_refusal = (
        "TRL's GRPOTrainer drives the loop with one model and one optimizer; the turns of a "
        "second policy would be trained into that model"
    )

    def __init__(
        self, options: TrlTrainerOptions | None = None, *,
        context: ComponentContext | None = None, run_dir: Path | None = None,
        exp_id: str | None = None, **kw: object,
    ) -> None:
        super().__init__(options, context=context, run_dir=run_dir, exp_id=exp_id, **kw)
        self.trl_trainer: GRPOTrainer | None = None
        self.rollout: HubRollout | None = None
        #: the model TRL trains (a name or directory), what its checkpoints belong to
        self.base_model = ""

    def resume_step(self, run_dir: Path) -> int | None:
        """The steps TRL's newest checkpoint holds (:func:`~rollhub_trl.resume.checkpoint_step`)."""
        return checkpoint_step(run_dir / OUTPUT_DIR)

    async def drive(self, run: DrivenRun) -> dict[str, Any]:
        """Build TRL's trainer on the hub and train; see the module doc."""
        loop = asyncio.get_running_loop()
        hub, recorder = run.hub, run.recorder
        cfg = hub.config
        model, tokenizer = await asyncio.to_thread(self._load_model, cfg)
        self.rollout = rollout = HubRollout(
            hub, loop,
            filler_id=int(tokenizer.eos_token_id),
            success_threshold=cfg.rewards.success_threshold,
            advantage=cfg.training.advantage,
            sampling_model=lambda: self.trl_trainer.model if self.trl_trainer else model,
        )
        trl_trainer = self.trl_trainer = await asyncio.to_thread(
            self._build, run, model, tokenizer, rollout, loop
        )
        start = recorder.history[-1]["step"] + 1 if recorder.history else 0
        checkpoint: Path | None = None
        if run.resume:
            output_dir = run.run_dir / OUTPUT_DIR
            checkpoint = resume_checkpoint(output_dir, len(recorder.history))
            if checkpoint is not None:
                restore_seed_rounds(hub, checkpoint)  # before TRL's first rollout
        if not self.options.use_vllm:
            await hub.publish_policy(trl_trainer.model, start)
        else:
            hub.set_weight_version(start)
        try:
            await asyncio.to_thread(
                self._train, trl_trainer,
                resume_from_checkpoint=None if checkpoint is None else str(checkpoint),
            )
        except BaseException:
            rollout.stopping = True  # a cancelled run: TRL's thread stops at its next batch
            raise
        final = run.run_dir / "model"
        await asyncio.to_thread(trl_trainer.save_model, str(final))
        return {
            "steps": trl_trainer.state.global_step,
            "total_steps": recorder.total_steps,
            "weight_version": hub.weight_version,
            "last": recorder.history[-1] if recorder.history else None,
            "model": str(final),
        }

    def _use_threads(self) -> None:
        """Give this thread's torch work its cores (threads keep their own count; see
        :mod:`rollhub_gateway.engines.cpu_threads`)."""
        from rollhub_gateway.engines.cpu_threads import set_thread_count, usable_cores

        set_thread_count(self.options.threads or usable_cores())

    def _train(self, trl_trainer: Any, **kwargs: Any) -> None:
        self._use_threads()
        trl_trainer.train(**kwargs)

    def _load_model(
        self, cfg: RollhubConfig
    ) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
        from rollhub_gateway.engines.configured import engine_model
        from rollhub_gateway.models import load_causal_lm, train_top_layers

        self._use_threads()
        name = self.base_model = self.options.model or engine_model(cfg)
        model, tokenizer = load_causal_lm(name, field="trainer.model")
        train_top_layers(model, self.options.train_layers)
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        return model, tokenizer

    def grpo_config(self, cfg: RollhubConfig, run_dir: Path, total_steps: int) -> GRPOConfig:
        """TRL's ``GRPOConfig`` for this run: rollhub's settings over ``[trainer.args]``.

        :raises ConfigError: ``experiment.n_samples`` below 2, or TRL refused an argument.
        """
        from trl import GRPOConfig

        checkpointing = _checkpointing_field()
        n, groups = cfg.experiment.n_samples, cfg.training.batch_groups
        if n < 2:
            raise ConfigError(
                "experiment.n_samples must be at least 2 for TRL's GRPO (advantages are "
                "relative to the group)", field="experiment.n_samples",
            )
        every = cfg.training.checkpoint_every
        kwargs: dict[str, Any] = {
            # CPU defaults; [trainer.args] may change them
            "bf16": False,
            checkpointing: False,  # recomputing activations only costs time on a CPU
            "report_to": "none",
            "save_strategy": "steps" if every else "no",
            "save_steps": every or 500,
            "disable_tqdm": True,
            "lr_scheduler_type": "constant",  # as the torch trainer: curves are comparable
            **self.options.args,
            "output_dir": str(run_dir / OUTPUT_DIR),
            "learning_rate": self.options.learning_rate,
            "num_generations": n,
            "per_device_train_batch_size": n,
            "gradient_accumulation_steps": groups,
            "steps_per_generation": groups,
            "max_steps": total_steps,
            "save_total_limit": cfg.training.keep_checkpoints,  # TRL keeps every one without it
            "shuffle_dataset": cfg.training.shuffle,
            "seed": cfg.experiment.seed,
            "temperature": float((cfg.experiment.sampling or {}).get("temperature", 1.0)) or 1.0,
            "logging_steps": 1,
            "use_vllm": self.options.use_vllm,
            "use_cpu": not self.options.use_vllm,
        }
        try:
            return GRPOConfig(**kwargs)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"trainer.args: TRL's GRPOConfig refused them: {exc}",
                              field="trainer.args") from exc

    def _build(
        self, run: DrivenRun, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
        rollout: HubRollout, loop: asyncio.AbstractEventLoop,
    ) -> GRPOTrainer:
        os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is the point
        from datasets import Dataset

        args = self.grpo_config(run.hub.config, run.run_dir, run.recorder.total_steps)
        dataset = Dataset.from_list([{"prompt": as_prompt(p)} for p in run.payloads])
        trainer = _grpo_trainer_class(self.base_model, self.options.train_layers)(
            model=model,
            reward_funcs=[rollhub_reward],
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            rollout_func=rollout,
            callbacks=[_step_callback(self, run, loop)],
        )
        from transformers import PrinterCallback

        trainer.remove_callback(PrinterCallback)  # the recorder prints one line per step
        return trainer


def _step_callback(
    owner: TrlTrainer, run: DrivenRun, loop: asyncio.AbstractEventLoop
) -> TrainerCallback:
    """A :class:`_StepCallback` that is a transformers ``TrainerCallback`` (the ``on_*``
    methods not written there are its no-ops)."""
    from transformers import TrainerCallback

    class StepCallback(_StepCallback, TrainerCallback):
        pass

    return StepCallback(owner, run, loop)


class _StepCallback:
    """Publishes the new weight version after each optimizer step, records the step with
    TRL's logs once they arrive, and keeps the hub's seed rounds in each checkpoint.

    transformers calls a callback's ``on_*`` methods by name; :func:`_step_callback` adds
    the ones not written here from ``TrainerCallback`` (this class stays importable without
    transformers, so that registering the plugin imports nothing heavy).
    """

    def __init__(self, owner: TrlTrainer, run: DrivenRun, loop: asyncio.AbstractEventLoop):
        self.owner, self.run, self.loop = owner, run, loop
        self.t_step = time.monotonic()

    def _on_loop(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def on_step_begin(self, args: TrainingArguments, state: TrainerState,
                      control: TrainerControl, **kw: object) -> None:
        self.t_step = time.monotonic()

    def on_step_end(self, args: TrainingArguments, state: TrainerState,
                    control: TrainerControl, **kw: object) -> None:
        hub, trainer = self.run.hub, self.owner.trl_trainer
        version = int(state.global_step)
        assert trainer is not None  # set before TRL's train() calls back
        if self.owner.options.use_vllm:
            hub.set_weight_version(version)  # TRL syncs vLLM's weights itself
        else:
            self._on_loop(hub.publish_policy(trainer.model, version))
        rollout = self.owner.rollout
        if rollout is not None and rollout.stopping:
            control.should_training_stop = True

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                **kw: object) -> None:
        if not state.is_world_process_zero:
            return
        folder = checkpoint_folder(self.run.run_dir / OUTPUT_DIR, state.global_step)

        async def save() -> None:
            # on the hub's loop, where seeds are drawn; TRL has no rollout in flight
            # between its steps, so the live rounds are those its next step begins with
            save_seed_rounds(self.run.hub, folder)

        self._on_loop(save())

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
               logs: dict[str, float] | None = None, **kw: object) -> None:
        rollout = self.owner.rollout
        if rollout is None or not rollout.pending or not logs or "loss" not in logs:
            return  # TRL's end-of-training summary, or nothing sampled yet
        pending = rollout.pending.pop(0)
        metrics = dict(pending.metrics)
        for key, value in logs.items():
            if not isinstance(value, int | float):
                continue
            if key in ("loss", "grad_norm", "learning_rate", "entropy"):
                metrics[key] = value
            elif key not in ("epoch", "step"):
                metrics["trl_" + key.replace("/", "_")] = value
        now = time.monotonic()
        metrics["weight_version"] = int(state.global_step)
        metrics["time_step_s"] = round(now - self.t_step, 3)
        metrics["time_train_s"] = round(max(0.0, metrics["time_step_s"] - metrics["time_sample_s"]), 3)
        self._on_loop(self.run.recorder.record(pending.batch, metrics))
