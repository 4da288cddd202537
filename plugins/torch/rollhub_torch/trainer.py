"""The ``torch`` trainer: RL steps in process, on the model the gateway samples from.

rollhub's training loop drives it (the "rollhub drives" shape). Per step:

1. the batch's trainable episodes become prompt groups (:mod:`rollhub_torch.sequences`):
   exact sampled ids, the loss mask (tool results and prompts are 0) and the sampler's
   logprobs;
2. each prompt is forwarded once and its responses, at most ``max_rows`` at a time (parts
   of similar lengths, :func:`~rollhub_torch.sequences.response_parts`), as batches on
   its key/value states; logits are computed only where a token was sampled, a chunk at a
   time, and not kept for the backward pass (:mod:`rollhub_torch.token_logprobs`); the
   frozen layers' part of the responses mostly ran during sampling
   (:mod:`rollhub_torch.frozen_ahead`);
3. the loss (``importance_sampling``: −min(ratio, ``tis_cap``)·advantage per sampled
   token, truncated importance sampling; ``ppo``: the clipped surrogate, dual-clipped for
   negative advantages; ``cross_entropy``:
   −logprob, for a supervised phase), plus ``kl_coef`` times the KL to the reference
   policy (the weights the run started from) when set, is summed over sampled tokens and
   divided by their number in the batch (:mod:`rollhub_torch.losses`); Adam steps the
   trained parameters (the top ``train_layers`` decoder layers and the final norm);
4. the trained parameters are the new policy: the loop publishes them to the gateway's
   ``transformers`` engine, which copies them in between batches, so the next turns are
   sampled by them and stamped with the new version.

The trainer keeps its own copy of the trained parameters apart from the engine's:
sampling for step ``s + 1`` can run while step ``s`` trains (``max_staleness = 1``)
without ever reading half-updated weights. The frozen ones (embeddings, lower layers) exist
once: on the in-process ``transformers`` engine, the first policy published is a copy of
this model that shares them (:mod:`rollhub_torch.shared_weights`), and the engine drops
the model it loaded.

Learner logprobs are taken at the sampling temperature (``experiment.sampling.temperature``
unless ``temperature`` is set), the distribution the engine's logprobs refer to, so the
importance ratio is 1 for on-policy tokens and ``sampler_learner_kl`` measures real drift.
Off-policy tokens (``max_staleness > 0``, or a sampler that drifted) never meet an
unbounded ratio: ``importance_sampling`` truncates it at ``tis_cap`` (its gradient is
``min(ratio, cap)·∇log π·A``) and ``ppo`` clips it.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import time
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field
from rollhub.config import RollhubConfig
from rollhub.registry import ComponentContext
from rollhub.training import PolicyTrainer, StepResult, TrainerOptions, TrainingBatch
from rollhub_gateway.engines.allocator import release_free_memory
from rollhub_gateway.engines.cpu_threads import set_thread_count, usable_cores

from rollhub_torch import trainer_state
from rollhub_torch.frozen_ahead import FrozenAhead, first_trained_layer, split_matches
from rollhub_torch.losses import LossFn, reference_penalty, token_loss
from rollhub_torch.prompt_forward import PromptForward
from rollhub_torch.sequences import PromptGroup, prompt_groups, response_parts, shared_prefix
from rollhub_torch.sequences import response_tensors as _response_tensors
from rollhub_torch.shared_weights import copy_trained
from rollhub_torch.trainer_state import TorchTrainingError

if TYPE_CHECKING:
    import torch
    from rollhub.episode import Episode

__all__ = ["TorchTrainer", "TorchTrainerOptions", "TorchTrainingError"]

log = logging.getLogger(__name__)


class TorchTrainerOptions(TrainerOptions):
    """``[trainer]`` options of the ``torch`` trainer."""

    model: str | None = Field(
        None,
        description="'smollm2-135m-instruct' or a local model directory; None: the model of "
        "the gateway's transformers engine (else smollm2-135m-instruct)",
    )
    train_layers: int | None = Field(
        8, ge=1,
        description="train the top N decoder layers and the final norm (None: every parameter)",
    )
    loss_fn: LossFn = "importance_sampling"
    clip: float = Field(0.2, gt=0, description="ppo: ratio clipped to [1 - clip, 1 + clip]")
    dual_clip: float = Field(
        3.0, gt=1,
        description="ppo: a token with a negative advantage loses at most dual_clip·|A| (the "
        "ratio PPO's clip leaves unbounded there)",
    )
    tis_cap: float = Field(
        2.0, ge=1,
        description="importance_sampling: the sampler-to-learner ratio is truncated at this "
        "value (truncated importance sampling); its gradient is min(ratio, cap)·∇log π·A",
    )
    kl_coef: float = Field(
        0.0, ge=0,
        description="weight of a KL penalty to the reference policy (the weights the run "
        "started from), per sampled token; 0: none",
    )
    learning_rate: float = Field(1e-5, ge=0, description="0 trains nothing (a control run)")
    beta1: float = Field(0.9, ge=0, lt=1)
    beta2: float = Field(0.95, ge=0, lt=1)
    eps: float = Field(1e-8, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    grad_clip_norm: float = Field(1.0, ge=0, description="0: no clipping")
    temperature: float | None = Field(
        None, gt=0, description="None: experiment.sampling.temperature (else 1.0)"
    )
    max_length: int | None = Field(
        None, ge=2, description="tokens per record; longer records are cut (and counted)"
    )
    max_rows: int = Field(
        16, ge=1, description="most responses forwarded together on one prompt"
    )
    recompute: bool = Field(
        False, description="recompute the trained layers' activations in the backward pass "
        "(about 0.5 MB less memory a response token at SmolLM2's size, for one more forward "
        "of those layers, ~10% of a step's training time)",
    )
    threads: int | None = Field(
        None, ge=1, description="torch intra-op threads of a training step (None: every core)"
    )
    forward_ahead: bool = Field(
        True, description="forward each finished episode's responses through the frozen "
        "layers while the step's others are sampled, on a thread of its own (where the "
        "model splits there exactly; rollhub_torch.frozen_ahead)",
    )
    seed: int = Field(0, description="torch's seed")


class TorchTrainer(PolicyTrainer):
    """In-process RL on a transformers causal LM (CPU)."""

    name = "torch"
    Options = TorchTrainerOptions
    options: TorchTrainerOptions

    def __init__(
        self, options: TorchTrainerOptions | None = None, *,
        context: ComponentContext | None = None, run_dir: Path | None = None,
        exp_id: str | None = None, **kw: object,
    ) -> None:
        from rollhub_gateway.engines.configured import engine_model

        super().__init__(options, context=context, run_dir=run_dir, exp_id=exp_id, **kw)
        self.model_name = self.options.model or engine_model(self.context.config)
        self.temperature = self.options.temperature or _sampling_temperature(self.context.config)
        self.model: Any = None
        self.optimizer: Any = None
        self.trained: dict[str, Any] = {}
        self.reference: Any = None  # the KL penalty's frozen start (kl_coef > 0)
        self.steps_done = 0
        self._cache_kw = "past_key_values"
        self._ahead: FrozenAhead | None = None

    async def start(self) -> None:
        """Load the model and mark the trained parameters."""
        await asyncio.to_thread(self._load)

    def _load(self) -> None:
        import torch
        from rollhub_gateway.engines.allocator import tune_allocator
        from rollhub_gateway.models import load_causal_lm, train_top_layers

        tune_allocator()
        self._use_threads()
        torch.manual_seed(self.options.seed)
        model, _ = load_causal_lm(self.model_name, field="trainer.model")
        model.train()
        train_top_layers(model, self.options.train_layers)
        decoder = model.get_decoder()
        self.trained = {k: p for k, p in model.named_parameters() if p.requires_grad}
        opts = self.options
        self.optimizer = torch.optim.AdamW(
            list(self.trained.values()), lr=opts.learning_rate, betas=(opts.beta1, opts.beta2),
            eps=opts.eps, weight_decay=opts.weight_decay,
        )
        params = inspect.signature(decoder.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self.model = model
        self.reference = copy_trained(model, self.trained) if opts.kl_coef > 0 else None
        first = first_trained_layer(model) if opts.forward_ahead else None
        if first is not None and split_matches(model, first, self._cache_kw):
            self._ahead = FrozenAhead(model, first, self._cache_kw)
        log.info(
            "torch trainer: %s, %d of %d parameters trained (%s)", self.model_name,
            sum(p.numel() for p in self.trained.values()),
            sum(p.numel() for p in model.parameters()),
            "every layer" if opts.train_layers is None else f"top {opts.train_layers} layers",
        )

    def policy(self) -> dict[str, Any]:
        """The trained parameters as a new policy (copies: training goes on in place)."""
        return {k: p.detach().clone() for k, p in self.trained.items()}

    async def initial_policy(self) -> torch.nn.Module | dict[str, torch.Tensor] | None:
        """For this process's ``transformers`` engine on the same model: a copy of this
        model sharing its frozen parameters, which the engine samples from from now on (its
        own copy of the model is dropped; later steps publish the trained parameters into
        it). Otherwise None on a fresh run (the engine already holds the base weights),
        else the restored parameters."""
        if _engine_shares(self.context.config, self.model_name):
            return copy_trained(self.model, self.trained)
        return self.policy() if self.steps_done else None

    async def prepare(self, episode: Episode, step: int) -> None:
        """Queue the frozen layers' forward of the episode's responses
        (:mod:`rollhub_torch.frozen_ahead`), when the model splits there."""
        if self._ahead is not None:
            self._ahead.submit_episode(step, episode, self.options.max_length)

    async def step(self, batch: TrainingBatch) -> StepResult:
        """One optimizer step on the batch's sampled tokens; the new parameters as policy."""
        groups, stats = prompt_groups(
            batch.trainable(), max_length=self.options.max_length,
            skip_zero_advantage=self.options.loss_fn != "cross_entropy",
        )
        metrics: dict[str, Any] = {**stats.as_metrics(), "masked_tokens": stats.masked_tokens}
        t0 = time.perf_counter()
        if groups:
            try:
                metrics.update(await asyncio.to_thread(
                    self._train_and_free, batch.step, groups, stats.trained_tokens
                ))  # fmt: skip
            except RuntimeError as exc:
                raise TorchTrainingError(f"torch training step {batch.step} failed: {exc}") from exc
        else:
            log.info("step %d: no episode with a nonzero advantage; weights unchanged", batch.step)
        metrics["time_compute_s"] = round(time.perf_counter() - t0, 3)
        self.steps_done += 1
        t1 = time.perf_counter()
        policy = self.policy() if groups and self.options.learning_rate > 0 else None
        metrics["time_publish_s"] = round(time.perf_counter() - t1, 3)
        return StepResult(batch.weight_version + 1, metrics, policy)

    def _use_threads(self) -> None:
        """Give this thread's torch work its cores. Threads keep their own count, and the
        ones ``asyncio.to_thread`` runs take the last count set anywhere (the engine's,
        which leaves a core to the gateway): set it where the work runs, every step."""
        set_thread_count(self.options.threads or usable_cores())

    def _train_and_free(
        self, step: int, groups: list[PromptGroup], tokens: int
    ) -> dict[str, float]:
        """:meth:`_train`, then its gradients dropped: nothing reads them before the next
        backward, and kept they would be resident through the sampling in between (108 MB
        for the main job's 8 trained layers, at the run's peak). The forward ahead waits
        meanwhile: the step has the cores."""
        ahead = self._ahead
        if ahead is not None:
            ahead.pause(step)
        try:
            return self._train(groups, tokens)
        finally:
            self.optimizer.zero_grad(set_to_none=True)
            release_free_memory()  # the step's activations and gradients, freed in holes
            if ahead is not None:
                ahead.resume(step)

    def _train(self, groups: list[PromptGroup], tokens: int) -> dict[str, float]:
        import torch

        self._use_threads()
        self.optimizer.zero_grad(set_to_none=True)
        totals: defaultdict[str, float] = defaultdict(float)
        shared = shared_prefix([g.prompt_ids for g in groups])
        # forwarded once a step; the groups' gradients gather on its cut and go back
        # through its graph once, after the last group
        start = PromptForward.run(self.model, shared, self._cache_kw).cut() if shared else None
        for group in groups:
            self._backward(group, tokens, totals, start=start)
        if start is not None:
            start.backward()
        params = list(self.trained.values())
        clip = self.options.grad_clip_norm
        norm = torch.nn.utils.clip_grad_norm_(params, clip if clip > 0 else math.inf)
        self.optimizer.step()
        n = max(tokens, 1)
        metrics = {
            "loss": totals["loss"],
            "sampler_learner_kl": totals["kl"] / n,
            "sampler_learner_abs_diff": totals["abs_diff"] / n,
            "clipped_fraction": totals["clipped"] / n,
            "grad_norm": float(norm),
        }
        if self.reference is not None:
            metrics["reference_kl"] = totals["ref_kl"] / n
        if self._ahead is not None:  # the responses whose frozen layers ran while sampling
            rows = sum(len(g.responses) for g in groups)
            metrics["frozen_ahead_frac"] = round(totals["rows_ahead"] / max(rows, 1), 4)
        return metrics

    def _backward(
        self, group: PromptGroup, tokens: int, totals: defaultdict[str, float], *,
        start: PromptForward | None = None,
    ) -> None:
        """Forward one prompt (the rest of it after ``start``, the step's shared prefix),
        then its responses in parts of at most ``max_rows`` on its states (by length:
        :func:`~rollhub_torch.sequences.response_parts`), and backpropagate each part's
        share of the loss (its sums added to ``totals``). The parts see the prompt cut from
        its graph (:meth:`PromptForward.cut`), which their gradients go back through once,
        after the last; only one part's activations exist at a time."""
        import torch

        opts, store = self.options, self._ahead
        prompt = (
            start.extend(group.prompt_ids[start.length :]) if start is not None
            else PromptForward.run(self.model, group.prompt_ids, self._cache_kw)
        ).cut()
        reference = None
        if self.reference is not None:
            with torch.no_grad():
                reference = PromptForward.run(self.reference, group.prompt_ids, self._cache_kw)
        for rows in response_parts(group.responses, opts.max_rows):
            part = PromptGroup(group.prompt_ids, rows)
            ids, trained, sampler, advantage = _response_tensors(part)
            old, adv = sampler[trained], advantage[trained]
            frozen = None
            if store is not None:
                entering, ahead = store.entering(
                    group.prompt_ids, rows, prompt.states[: store.first]
                )
                frozen = (store.first, entering)
                totals["rows_ahead"] += ahead
            learner = prompt.token_logprobs(
                part, ids, trained, self.temperature, recompute=opts.recompute, frozen=frozen
            )
            per_token, clipped = token_loss(
                learner, old, adv, loss_fn=opts.loss_fn, clip=opts.clip,
                dual_clip=opts.dual_clip, tis_cap=opts.tis_cap,
            )
            ref_kl = torch.zeros(())
            if reference is not None:
                with torch.no_grad():
                    ref = reference.token_logprobs(part, ids, trained, self.temperature)
                penalty = reference_penalty(learner, ref)
                per_token = per_token + opts.kl_coef * penalty
                ref_kl = penalty.detach().sum()
            loss = per_token.sum() / max(tokens, 1)
            loss.backward()
            drift = old - learner.detach()
            totals["loss"] += float(loss.detach())
            totals["kl"] += float(drift.sum())
            totals["abs_diff"] += float(drift.abs().sum())
            totals["clipped"] += float(clipped)
            totals["ref_kl"] += float(ref_kl)
        prompt.backward()

    async def save_state(self, directory: Path) -> dict[str, Any]:
        """The trained parameters (``policy.safetensors``) and Adam's state."""
        await asyncio.to_thread(
            trainer_state.save_trained, directory, self.trained, self.optimizer, self.model_name
        )
        return {"steps_done": self.steps_done, "model": self.model_name,
                "train_layers": self.options.train_layers, "policy": trainer_state.POLICY_FILE}

    async def load_state(self, directory: Path, state: dict[str, Any]) -> None:
        """Restore what :meth:`save_state` wrote."""
        trainer_state.check_resumable(directory, state, self.model_name, self.options.train_layers)
        await asyncio.to_thread(
            trainer_state.restore_trained, directory, self.trained, self.optimizer
        )
        self.steps_done = int(state.get("steps_done", 0))

    async def close(self) -> dict[str, Any]:
        """Release the model."""
        if self._ahead is not None:
            await asyncio.to_thread(self._ahead.close)
            self._ahead = None
        self.model = self.optimizer = self.reference = None
        self.trained = {}
        return {"steps": self.steps_done}


def _engine_shares(config: RollhubConfig | None, model: str) -> bool:
    """Whether the token source is an in-process gateway whose ``transformers`` engine
    samples ``model`` in float32: it can then share this trainer's frozen parameters."""
    from rollhub_gateway.engines.configured import (
        gateway_options,
        in_process,
        transformers_options,
    )

    gateway = gateway_options(config)
    if gateway is None or not in_process(gateway):
        return False
    engine = transformers_options(gateway)
    return engine is not None and engine.dtype == "float32" and engine.model == model


def _sampling_temperature(config: RollhubConfig | None) -> float:
    sampling = config.experiment.sampling if config is not None else {}
    return float(sampling.get("temperature", 1.0)) or 1.0
