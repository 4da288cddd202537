"""TRL's ``rollout_func`` over rollhub's :class:`~rollhub.hubs.async_hub.AsyncHub`.

TRL calls ``rollout_func(prompts, trainer)`` once per generation batch, on its own thread.
Each prompt here is one dataset row (a JSON payload); TRL's sampler repeats each row
``num_generations`` times in a row, so a run of equal prompts is one GRPO group: it becomes
one ``hub.run_group(payload, n)`` on the hub's event loop. Submission, token capture, reward
and the ``[rewards]`` failure policy are the hub's; this module only converts.

One episode becomes one TRL sample: its trace record is fitted by the core
(:func:`rollhub.training.fitting.fit_record`, as for the other trainers; TRL sets no length
budget, so every token is kept) and :func:`trl_sample` converts the fitted record:

- ``prompt_ids`` / ``completion_ids``: the ``prompt_ids`` and ``response_ids`` of the
  episode's trace record, as the gateway recorded them (never re-tokenised);
- ``logprobs``: the sampler's logprob of each response token (0.0 where nothing was
  sampled);
- ``env_mask``: the record's mask: 1 on sampled tokens, 0 on tool results and template
  tokens, so TRL's loss sees only what the model produced;
- ``rollhub_reward``: the episode's reward, read by :func:`rollhub_reward`, TRL's reward
  function here. An episode that may not train (failed, or excluded by the failure
  policy) gets reward None (TRL leaves it out of the group baseline and gives it
  advantage 0) and an all-zero ``env_mask``: it never contributes a gradient.

An episode with several records (the agent forked its conversation, or a sub-agent ran: a
record per branch) gives TRL the record holding the episode's last model call that produced
tokens (:func:`final_record`); the others are dropped and counted
(``trl_records_dropped``), since TRL takes exactly one completion per sample.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rollhub.episode import Episode, EpisodeGroup
from rollhub.errors import RollhubError
from rollhub.trace import TraceRecord, last_call_index
from rollhub.training import TrainingBatch
from rollhub.training.advantages import group_advantages
from rollhub.training.fitting import FittedRecord, fit_record
from rollhub.training.loop import batch_metrics

if TYPE_CHECKING:
    import torch
    from rollhub.hubs.view import HubView

__all__ = [
    "HubRollout", "Sample", "episode_sample", "final_record", "rollhub_reward", "trl_sample"
]

log = logging.getLogger(__name__)

#: the extra fields this rollout function returns besides TRL's required keys
REWARD_FIELD = "rollhub_reward"
STATUS_FIELD = "rollhub_status"
EPISODE_FIELD = "rollhub_episode_id"


@dataclass
class Sample:
    """One TRL completion made from one episode."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    env_mask: list[int]
    reward: float | None
    records_dropped: int = 0


def final_record(records: Sequence[TraceRecord]) -> TraceRecord | None:
    """The record TRL trains: the one holding the episode's last model call that produced
    tokens (:func:`rollhub.trace.last_call_index`), or None."""
    index = last_call_index(records)
    return None if index is None else records[index]


def episode_sample(episode: Episode, filler_id: int, *, advantage: float = 0.0) -> Sample:
    """The TRL sample of one episode (see the module doc for the rules).

    :param filler_id: the token an episode without a usable record is given (a one-token
        prompt and completion, masked out): TRL needs a completion for every sample.
    :param advantage: the episode's advantage, kept on the fitted record.
    """
    record = final_record(episode.traces)
    if not episode.trainable or not episode.ok or record is None or not record.response_ids:
        reward = episode.reward if episode.trainable else None
        return Sample([filler_id], [filler_id], [0.0], [0], reward)
    ids, mask, logprobs = record.response_ids, record.response_mask, record.response_logprobs
    if not (len(ids) == len(mask) == len(logprobs)):
        raise RollhubError(
            f"episode {episode.episode_id}: its trace record has {len(ids)} response ids, "
            f"{len(mask)} mask entries and {len(logprobs)} logprobs; they must align"
        )
    # keep_empty: a record with no sampled token is still TRL's completion (all masked)
    fitted = fit_record(record, advantage, episode_id=episode.episode_id, keep_empty=True)
    assert fitted is not None  # with keep_empty and no length budget every record is kept
    return trl_sample(fitted, episode.reward, records_dropped=len(episode.traces) - 1)


def trl_sample(fitted: FittedRecord, reward: float | None, *, records_dropped: int = 0) -> Sample:
    """A fitted record as TRL's completion: its ids as fitted, its mask as ``env_mask``, and
    the sampler's logprob where the model sampled the token (0.0 elsewhere)."""
    mask = fitted.response_mask
    return Sample(
        list(fitted.prompt_ids),
        list(fitted.response_ids),
        [float(lp) if m else 0.0 for lp, m in zip(fitted.response_logprobs, mask, strict=True)],
        [int(m) for m in mask],
        reward,
        records_dropped=records_dropped,
    )


def rollhub_reward(
    prompts: Sequence[object], completions: Sequence[object], **kwargs: object
) -> list[float | None]:
    """TRL reward function: each completion's episode reward (None: leave it out)."""
    rewards = kwargs[REWARD_FIELD]
    if not isinstance(rewards, Sequence):
        raise TypeError(f"TRL passed {REWARD_FIELD} as a {type(rewards).__name__}, not the "
                        f"per-sample list the rollout function returned")
    return list(rewards)


@dataclass
class PendingStep:
    """A generation batch waiting for TRL's optimizer step (and its logs)."""

    batch: TrainingBatch
    metrics: dict[str, Any] = field(default_factory=dict)


class HubRollout:
    """The callable TRL gets as ``rollout_func``.

    :param hub: the started hub.
    :param loop: the event loop the hub runs on (TRL calls from another thread).
    :param filler_id: token id of the placeholder sample (the tokenizer's eos).
    :param success_threshold: ``[rewards] success_threshold`` (for the step's metrics).
    :param advantage: ``[training] advantage`` (the estimate kept in ``episodes.jsonl``).
    :param sampling_model: returns the module the engine samples from; it is put in eval
        mode while episodes run and back in the mode TRL left it in.
    """

    def __init__(
        self,
        hub: HubView,
        loop: asyncio.AbstractEventLoop,
        *,
        filler_id: int,
        success_threshold: float = 1.0,
        advantage: str = "grpo",
        sampling_model: Callable[[], torch.nn.Module | None] | None = None,
    ) -> None:
        self.hub = hub
        self.loop = loop
        self.filler_id = filler_id
        self.success_threshold = success_threshold
        self.advantage = advantage
        self.sampling_model = sampling_model
        self.pending: list[PendingStep] = []
        self.stopping = False
        self.calls = 0

    def __call__(self, prompts: Sequence[object], trainer: object) -> dict[str, list[Any]]:
        if self.stopping:
            raise RollhubError("the run is stopping: no new episodes")
        step = int(getattr(getattr(trainer, "state", None), "global_step", self.calls))
        runs = _runs(prompts, getattr(trainer, "num_generations", None))
        model = self.sampling_model() if self.sampling_model else None
        was_training = bool(model is not None and model.training)
        t0 = time.monotonic()
        if model is not None:
            model.eval()  # sampling: no dropout, and key/value caching stays on
        try:
            groups = asyncio.run_coroutine_threadsafe(self._groups(runs), self.loop).result()
        finally:
            if model is not None:
                model.train(was_training)
        self.calls += 1
        advantages: dict[str, float] = {}
        for g in groups:
            advantages.update(group_advantages(g, self.advantage))
        samples = [
            episode_sample(e, self.filler_id, advantage=advantages.get(e.episode_id, 0.0))
            for g in groups for e in g.episodes
        ]
        version = self.hub.weight_version
        batch = TrainingBatch(step, groups, advantages, step if version is None else version)
        metrics = batch_metrics(batch, self.success_threshold)
        metrics["time_sample_s"] = round(time.monotonic() - t0, 3)
        metrics["trl_records_dropped"] = sum(s.records_dropped for s in samples)
        metrics["trained_tokens"] = sum(sum(s.env_mask) for s in samples)
        self.pending.append(PendingStep(batch, metrics))
        return {
            "prompt_ids": [s.prompt_ids for s in samples],
            "completion_ids": [s.completion_ids for s in samples],
            "logprobs": [s.logprobs for s in samples],
            "env_mask": [s.env_mask for s in samples],
            REWARD_FIELD: [s.reward for s in samples],
            STATUS_FIELD: [e.status for g in groups for e in g.episodes],
            EPISODE_FIELD: [e.episode_id for g in groups for e in g.episodes],
        }

    async def _groups(self, runs: list[tuple[dict[str, Any], int]]) -> list[EpisodeGroup]:
        return list(await asyncio.gather(*(self.hub.run_group(p, n) for p, n in runs)))


def _runs(prompts: Sequence[object], size: int | None = None) -> list[tuple[dict[str, Any], int]]:
    """Consecutive equal prompts → ``(payload, count)``: one group each, of at most ``size``
    (TRL's ``num_generations``): a row drawn at the end of one epoch and again at the start
    of the next is two groups, as TRL's advantages count them."""
    runs: list[tuple[object, int]] = []
    for prompt in prompts:
        if runs and runs[-1][0] == prompt and (size is None or runs[-1][1] < size):
            runs[-1] = (prompt, runs[-1][1] + 1)
        else:
            runs.append((prompt, 1))
    return [(payload_of(p), n) for p, n in runs]


def payload_of(prompt: object) -> dict[str, Any]:
    """The dataset row a TRL prompt stands for (rows travel through TRL as JSON text)."""
    if isinstance(prompt, dict):
        return prompt
    try:
        payload = json.loads(prompt) if isinstance(prompt, str | bytes | bytearray) else None
    except ValueError:
        payload = None
    if not isinstance(payload, dict):
        raise RollhubError(
            f"TRL passed the prompt {str(prompt)[:80]!r}, not a rollhub dataset row; the trl "
            "trainer builds TRL's dataset itself from experiment.dataset"
        )
    return payload


def as_prompt(payload: dict[str, Any]) -> str:
    """A dataset row as TRL's ``prompt`` column (JSON text, keys sorted)."""
    return json.dumps(payload, sort_keys=True)
