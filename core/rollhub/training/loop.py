"""The core's training loop, for trainers that rollhub drives (Tinker, a user's own).

One step::

    sample   batch_groups prompts × n_samples through the hub (AsyncHub.run_group)
    score    failure policy (hub) → advantages per group (training.advantage)
    train    trainer.step(TrainingBatch) → StepResult(new version, metrics, policy)
    publish  hub.publish_policy(policy, version): the gateway's backend swaps between turns
    record   metrics.jsonl, metric sinks, rollhub_training_step hook, progress line;
             every episode of the step to episodes.jsonl (export schema + step, advantage,
             trained)
    save     a checkpoint every training.checkpoint_every steps (and after the last)

Prompts are laid out once as a schedule (:mod:`rollhub.training.schedule`: ``epochs``
passes, each its own shuffle of ``experiment.seed``, optionally stratified), and step ``s``
trains on schedule entries ``[s·B, (s+1)·B)``, so a resumed run continues exactly where
the checkpoint was taken: the checkpoint also keeps the hub's seed rounds, so the resumed
steps sample with the seeds the uninterrupted run would have used.

Bounded staleness: with ``experiment.max_staleness = k`` the groups of step ``s`` may be
submitted once ``s - k`` steps are done, i.e. sampled by weights at most ``k`` versions
older than the ones they train; ``k = 0`` is on-policy (sample, train, update, repeat).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rollhub.config import RollhubConfig
from rollhub.dataset import group_id_of
from rollhub.episode import EpisodeGroup
from rollhub.errors import UsageError
from rollhub.hubs.async_hub import AsyncHub
from rollhub.policies import effective_staleness
from rollhub.runs.run_dir import RunDir
from rollhub.scoring.group_rewards import group_reward_metrics
from rollhub.seeding import hub_seeds
from rollhub.training.advantages import group_advantages
from rollhub.training.batch_metrics import batch_metrics
from rollhub.training.checkpoint import (
    Checkpoint,
    dataset_fingerprint,
    latest_checkpoint,
    write_checkpoint,
)
from rollhub.training.recorder import StepRecorder, rewind_run
from rollhub.training.roles import PolicyTrainer, TrainerRole, role_of
from rollhub.training.schedule import advance_rounds, check_stratify, schedule
from rollhub.training.sinks import MetricSink
from rollhub.training.step import StepResult, TrainingBatch
from rollhub.training.trainer import Trainer

__all__ = ["TrainingLoop", "batch_metrics", "check_stratify", "planned_steps", "schedule"]

log = logging.getLogger(__name__)


def planned_steps(config: RollhubConfig, prompts: int) -> int:
    """Steps a run trains: ``training.steps``, or every prompt of every epoch once."""
    tr = config.training
    total = math.ceil(prompts * tr.epochs / tr.batch_groups)
    return min(total, tr.steps) if tr.steps else total


class TrainingLoop:
    """Runs training steps of the hub's trainer over a dataset.

    :param hub: a started hub whose trainer is a
        :class:`~rollhub.training.roles.PolicyTrainer`.
    :param payloads: the prompts (dataset order).
    :param run_dir: where ``metrics.jsonl``, ``checkpoints/`` and ``training.png`` go.
    :param sinks: extra metric sinks (``metrics.jsonl`` is always written).
    :param resume: continue from the run directory's latest checkpoint.
    :param progress: draw a progress bar (None: only on a terminal).
    """

    def __init__(
        self,
        hub: AsyncHub,
        payloads: Sequence[Mapping[str, Any]],
        *,
        run_dir: Path,
        sinks: Sequence[MetricSink] = (),
        resume: bool = False,
        progress: bool | None = None,
    ) -> None:
        self.hub = hub
        self.config = hub.config
        self.payloads = list(payloads)
        self.run_dir = run_dir
        self.resume = resume
        self.progress_enabled = progress
        self.extra_sinks = list(sinks)
        tr = self.config.training
        self.order = schedule(
            self.payloads, epochs=tr.epochs, shuffle=tr.shuffle,
            seed=self.config.experiment.seed, stratify=tr.stratify,
        )
        self.total_steps = planned_steps(self.config, len(self.payloads))
        self.fingerprint = dataset_fingerprint(
            [group_id_of(p, self.config.experiment.id_field) for p in self.payloads]
        )
        self.steps_done = 0
        self.weight_version = 0
        self.history: list[dict[str, Any]] = []
        self._sampling = IdleClock()
        self._rounds_from: tuple[int, dict[str, list[int]] | None] = (0, None)

    def batch_payloads(self, step: int) -> list[Mapping[str, Any]]:
        """The prompts step ``step`` trains on."""
        b = self.config.training.batch_groups
        return self.order[step * b : (step + 1) * b]

    def _caught_up(self, step: int) -> bool:
        """Whether training has reached ``step`` (what a producer running ahead waits for)."""
        return self.steps_done >= step

    async def run(self) -> dict[str, Any]:
        """Train until the last step; return a summary (steps, version, last metrics)."""
        trainer = self.hub.trainer
        if trainer is None or role_of(type(trainer)) is not TrainerRole.POLICY_TRAINER:
            raise UsageError(
                f"trainer {self.config.trainer.name!r} does not train; the training loop needs "
                f"a PolicyTrainer (e.g. 'torch' or 'tinker')"
            )
        self.run_dir.mkdir(parents=True, exist_ok=True)
        await self._restore(trainer)
        seeds = hub_seeds(self.hub)
        # the seed rounds as the first step of this process begins: each checkpoint adds
        # the steps trained since (not the live counts, which include steps sampled ahead)
        self._rounds_from = (self.steps_done, seeds.rounds() if seeds else None)
        await self.hub.publish_policy(await trainer.initial_policy(), self.weight_version)
        self.recorder = StepRecorder(
            self.hub,
            self.run_dir,
            total_steps=self.total_steps,
            sinks=self.extra_sinks,
            history=self.history,
            progress=self.progress_enabled,
        )
        try:
            with self.recorder:
                await self._steps(trainer, time.monotonic())
        finally:
            self.history = self.recorder.history
        return {
            "steps": self.steps_done,
            "total_steps": self.total_steps,
            "weight_version": self.weight_version,
            "last": self.history[-1] if self.history else None,
        }

    async def _restore(self, trainer: Trainer) -> None:
        if not self.resume:
            RunDir(self.run_dir).refuse_a_second_run()
            return
        ckpt = latest_checkpoint(self.run_dir)
        if ckpt is None:
            log.warning("no checkpoint in %s: starting from step 0", self.run_dir)
            self._truncate(0)
            return
        if ckpt.dataset != self.fingerprint:
            raise UsageError(
                f"checkpoint {ckpt.directory} was taken on another dataset ({ckpt.dataset}, now "
                f"{self.fingerprint}); resume with the same experiment.dataset and max_prompts"
            )
        await trainer.load_state(ckpt.trainer_dir, ckpt.trainer)
        self.steps_done, self.weight_version = ckpt.steps_done, ckpt.weight_version
        rounds = ckpt.seed_rounds
        if rounds is None:  # a checkpoint written before the seed rounds were kept
            tr = self.config.training
            log.warning("checkpoint %s predates seed rounds: resuming with the schedule and "
                        "seed rounds it implies", ckpt.directory)
            self.order = schedule(  # the epoch order that run started with
                self.payloads, epochs=tr.epochs, shuffle=tr.shuffle,
                seed=self.config.experiment.seed, stratify=tr.stratify, legacy_epochs=True,
            )
            rounds = self._rounds_at(ckpt.steps_done, 0, {})
        seeds = hub_seeds(self.hub)
        if seeds is not None:
            seeds.restore(rounds)
        self._truncate(ckpt.steps_done)
        log.info("resuming at step %d, weight version %d", ckpt.steps_done, ckpt.weight_version)

    def _truncate(self, step: int) -> None:
        """Drop the rows of steps that will run again (see :func:`rewind_run`); the metrics
        kept become the history."""
        self.history = rewind_run(self.run_dir, step)

    async def _steps(self, trainer: Trainer, t0: float) -> None:
        window = effective_staleness(self.config) or 0  # with [[policies]]: the narrowest
        done = asyncio.Condition()
        queue: asyncio.Queue[list[asyncio.Task[EpisodeGroup]]] = asyncio.Queue()
        first = self.steps_done

        async def produce() -> None:
            for s in range(first, self.total_steps):
                async with done:
                    await done.wait_for(functools.partial(self._caught_up, s - window))
                await queue.put([
                    asyncio.ensure_future(self._group(p, s, trainer))
                    for p in self.batch_payloads(s)
                ])  # fmt: skip

        producer = asyncio.ensure_future(produce())
        pending: list[asyncio.Task[EpisodeGroup]] = []
        t_last = t0
        try:
            for s in range(first, self.total_steps):
                t_wait = time.monotonic()
                pending = await _next_batch(queue, producer)
                groups = list(await asyncio.gather(*pending))
                pending = []
                t_train = time.monotonic()
                batch = self._batch(s, groups)
                result = await trainer.step(batch)
                _check_result(result, batch)
                await self.hub.publish_policy(result.policy, result.weight_version)
                t_end = time.monotonic()
                wall = max(t_end - t_last, 1e-9)
                sampler_idle = self._sampling.idle_between(t_last, t_end)
                t_last = t_end
                async with done:
                    self.steps_done, self.weight_version = s + 1, result.weight_version
                    done.notify_all()
                metrics = {
                    **batch_metrics(batch, self.config.rewards.success_threshold),
                    **group_reward_metrics(batch.groups),  # e.g. the judge's cost
                    **result.metrics,
                    "weight_version": result.weight_version,
                    "time_sample_s": round(t_train - t_wait, 3),
                    "time_train_s": round(t_end - t_train, 3),
                    "time_step_s": round(wall, 3),
                    # what overlapping sampling and training (max_staleness > 0) wins back
                    "trainer_idle_frac": round((t_train - t_wait) / wall, 4),
                    "sampler_idle_frac": round(sampler_idle / wall, 4),
                }
                await self.recorder.record(batch, metrics)
                every = self.config.training.checkpoint_every
                if every and ((s + 1) % every == 0 or s + 1 == self.total_steps):
                    await self._checkpoint(trainer)
        finally:
            producer.cancel()
            leftovers = [t for t in pending if not t.done()]
            while not queue.empty():
                leftovers.extend(queue.get_nowait())
            for t in leftovers:
                t.cancel()
            await asyncio.gather(producer, *leftovers, return_exceptions=True)

    async def _group(self, payload: Mapping[str, Any], step: int, trainer: Trainer) -> EpisodeGroup:
        # trainers older than the role bases have no prepare
        prepare = trainer.prepare if isinstance(trainer, PolicyTrainer) else None
        self._sampling.enter()
        try:
            return await self.hub.run_group(
                payload, self.config.experiment.n_samples,
                on_episode=None if prepare is None else functools.partial(prepare, step=step),
            )
        finally:
            self._sampling.leave()

    def _batch(self, step: int, groups: list[EpisodeGroup]) -> TrainingBatch:
        advantages: dict[str, float] = {}
        for g in groups:
            advantages.update(group_advantages(g, self.config.training.advantage))
        return TrainingBatch(step, groups, advantages, self.weight_version)

    def _rounds_at(
        self, step: int, first: int, rounds: dict[str, list[int]]
    ) -> dict[str, list[int]]:
        """The seed rounds at the start of ``step``, given ``rounds`` at the start of
        ``first``: every prompt of the steps between ran ``n_samples`` samples once."""
        ids = self.config.experiment.id_field
        b = self.config.training.batch_groups
        done = (group_id_of(p, ids) for p in self.order[first * b : step * b])
        return advance_rounds(rounds, done, self.config.experiment.n_samples)

    async def _checkpoint(self, trainer: Trainer) -> None:
        first, rounds = self._rounds_from
        ckpt = Checkpoint(
            self.steps_done, self.weight_version, self.fingerprint,
            seed_rounds=None if rounds is None else self._rounds_at(self.steps_done, first, rounds),
        )
        await write_checkpoint(
            self.run_dir / "checkpoints",
            ckpt,
            trainer.save_state,
            keep=self.config.training.keep_checkpoints,
            drop_trainer=trainer.drop_state,
        )


class IdleClock:
    """When nothing was in flight: the sampler's idle time over any window.

    Groups enter and leave; the clock keeps the idle intervals (none in flight) so that
    :meth:`idle_between` can tell how much of a step's window the sampler sat idle.
    """

    def __init__(self) -> None:
        self.active = 0
        self._since: float | None = time.monotonic()  # idle from creation
        self._spans: list[tuple[float, float]] = []

    def enter(self) -> None:
        """A group starts sampling."""
        if self.active == 0 and self._since is not None:
            self._spans.append((self._since, time.monotonic()))
            self._since = None
        self.active += 1

    def leave(self) -> None:
        """A group finished (or was cancelled)."""
        self.active -= 1
        if self.active == 0:
            self._since = time.monotonic()

    def idle_between(self, start: float, end: float) -> float:
        """Seconds within ``[start, end]`` with no group in flight; forgets older spans."""
        spans = [*self._spans, *([(self._since, end)] if self._since is not None else [])]
        idle = sum(max(0.0, min(b, end) - max(a, start)) for a, b in spans)
        self._spans = [(a, b) for a, b in self._spans if b > end]
        return idle


async def _next_batch(
    queue: asyncio.Queue[list[asyncio.Task[EpisodeGroup]]], producer: asyncio.Task[None]
) -> list[asyncio.Task[EpisodeGroup]]:
    """The next step's group tasks; a producer that died raises instead of hanging."""
    getter = asyncio.ensure_future(queue.get())
    await asyncio.wait({getter, producer}, return_when=asyncio.FIRST_COMPLETED)
    if getter.done():
        return getter.result()
    getter.cancel()
    producer.result()  # re-raises the producer's error
    raise RuntimeError("the sampling producer stopped before the last step")


def _check_result(result: object, batch: TrainingBatch) -> None:
    if not isinstance(result, StepResult):
        raise UsageError(
            f"trainer.step must return a rollhub.training.StepResult, got {type(result).__name__}"
        )
    if result.weight_version <= batch.weight_version:
        raise UsageError(
            f"trainer.step returned weight_version {result.weight_version} after training "
            f"version {batch.weight_version}; a step must produce a newer version"
        )
