"""slime's rollout hooks, served by the rollhub hub.

Two entry points, for the two ways slime lets a user take over rollouts:

- :func:`generate_rollout` for ``--rollout-function-path``: fetches prompt groups from
  slime's data source as slime's own loop does (over-sampling, dynamic filter; see
  :mod:`rollhub_slime.step_hooks`), runs each as one hub group of
  ``n_samples_per_prompt`` episodes and returns ``RolloutFnTrainOutput``; with
  ``evaluation=True`` it runs slime's ``--eval-*`` datasets and returns
  ``RolloutFnEvalOutput`` (each dataset's fields honoured or refused as
  :mod:`rollhub_slime.eval_options` lists; ``--custom-rm-path`` is refused in this mode,
  see :mod:`rollhub_slime.step_hooks`).
- :func:`generate` for ``--custom-generate-function-path``: slime keeps its own loop,
  reward model and filters, and each of its samples becomes one hub episode.

Shapes. A train group is ``list[Sample]`` when every episode of the step gave one sample.
When any episode forked into several samples, every group of the step becomes
``list[list[Sample]]`` (one list per episode, sharing a ``rollout_id``), because slime
flattens by looking at the first element only. Rewards then need
:func:`rollhub_slime.rewards.post_process_rewards` (``--custom-reward-post-process-path``),
which the launch helper sets.

Counts. Every rollout of a chosen group gives at least one sample, a failed one a
placeholder that slime does not learn from (:mod:`rollhub_slime.samples`), so a step hands
slime ``rollout_batch_size × n_samples_per_prompt`` rollouts as its own loop does: slime
builds its optimizer steps from that count (``num_steps = samples // global_batch_size``,
asserted ≥ 1) and drops what does not fill a step.
"""

from __future__ import annotations

import asyncio
import logging
from argparse import Namespace
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, SupportsInt

from rollhub.episode import Episode, EpisodeGroup
from rollhub.errors import ConfigError, RolloutFailed
from rollhub.hubs.async_hub import AsyncHub

from rollhub_slime.eval_data import eval_groups
from rollhub_slime.eval_options import check_eval_datasets, eval_sampling, generate_eval_sampling
from rollhub_slime.launch import REWARD_POST_PROCESS
from rollhub_slime.runner import process_hub
from rollhub_slime.samples import episode_to_samples, is_placeholder, payload_of
from rollhub_slime.settings import SlimeOptions
from rollhub_slime.slime_types import DataSource, Sample, SampleT
from rollhub_slime.step_hooks import StepHooks, check_slime_flags, filter_decision

if TYPE_CHECKING:
    from slime.rollout.base_types import RolloutFnEvalOutput, RolloutFnTrainOutput

log = logging.getLogger(__name__)

__all__ = ["eval_rollout", "generate", "generate_rollout", "train_rollout"]

_warned: set[str] = set()


def generate_rollout(
    args: Namespace, rollout_id: int, data_source: DataSource, evaluation: bool = False
) -> RolloutFnTrainOutput | RolloutFnEvalOutput:
    """``--rollout-function-path`` target.

    :param args: slime's parsed arguments.
    :param rollout_id: slime's training step; it becomes the hub's weight version, so
        episodes and turns without an engine-reported version carry it.
    :param data_source: slime's data source (``get_samples(k) -> list[list[Sample]]``).
    :param evaluation: run the eval datasets instead of a training step.
    :returns: ``RolloutFnTrainOutput`` or, for evaluation, ``RolloutFnEvalOutput``.
    """
    hooks = StepHooks.from_args(args)  # refuse what cannot be honoured before the hub starts
    runner = process_hub(args)
    if evaluation:
        return runner.run(eval_rollout(runner.hub, runner.options, args, rollout_id))
    return runner.run(
        train_rollout(runner.hub, runner.options, args, rollout_id, data_source, hooks)
    )


async def generate(
    args: Namespace, sample: SampleT, sampling_params: dict[str, Any], evaluation: bool = False
) -> list[SampleT] | SampleT:
    """``--custom-generate-function-path`` target: run one sample's episode.

    Training samples follow ``[experiment] sampling`` of rollhub.toml (the agent makes its
    own model calls; slime's ``sampling_params`` come from the same values when
    :mod:`rollhub_slime.launch` wrote slime's flags). An eval sample (``evaluation``: slime's
    own eval loop, one dataset at a time) runs with that dataset's temperature, top-p, top-k,
    max new tokens and stop strings from ``sampling_params`` merged over them. A finished
    episode without a reward keeps ``reward`` None, so slime's reward model scores it.

    :returns: ``list[Sample]`` (``generate_returns_list``, the default) or, when off, a
        single ``Sample`` unless the episode forked.
    """
    check_slime_flags(args)
    # first use builds and starts the hub, which blocks: keep that off slime's event loop
    runner = await asyncio.to_thread(process_hub, args)
    options = runner.options
    payload = payload_of(sample, prompt_field=options.prompt_field, label_field=options.label_field)
    group_id = _group_id(payload, runner.hub, sample)
    sampling = generate_eval_sampling(sampling_params) if evaluation else None
    episode: Episode = await runner.run_async(
        runner.hub.run_episode(payload, group_id, _int(sample.index), sampling=sampling)
    )
    samples = episode_to_samples(
        episode, sample, response_field=options.response_field, keep_missing_reward=True
    )
    if options.generate_returns_list or len(samples) > 1:
        return samples
    return samples[0]


async def train_rollout(
    hub: AsyncHub,
    options: SlimeOptions,
    args: Namespace,
    rollout_id: int,
    data_source: DataSource,
    hooks: StepHooks | None = None,
) -> RolloutFnTrainOutput:
    """Run one training step through ``hub``, as slime's own rollout loop does.

    Prompt groups are fetched ``--over-sampling-batch-size`` at a time and run as hub
    groups; each finished group passes ``--dynamic-sampling-filter-path`` or is dropped
    (and more are fetched), until ``--rollout-batch-size`` groups are chosen. Groups still
    running then are cancelled. A group whose every rollout failed is chosen without
    filtering (as placeholders only), so a failing agent cannot make the step fetch forever.
    The chosen groups are sorted by index; ``--rollout-sample-filter-path`` and
    ``--rollout-all-samples-process-path`` then run as in slime.

    :param data_source: slime's data source (``get_samples(k) -> list[list[Sample]]``).
    :param hooks: the step arguments, loaded (default: from ``args``).
    :returns: ``RolloutFnTrainOutput``.
    :raises RolloutFailed: no rollout of the step produced a token to train on.
    """
    from slime.rollout.base_types import RolloutFnTrainOutput

    hooks = hooks or StepHooks.from_args(args)
    hub.set_weight_version(rollout_id)
    pending: dict[asyncio.Future[EpisodeGroup], list[Sample]] = {}
    chosen: list[_Finished] = []
    finished: list[_Finished] = []
    drops: Counter[str] = Counter()
    remaining, exhausted = 0, False
    try:
        while len(chosen) < hooks.rollout_batch_size and (pending or not exhausted):
            while remaining < hooks.rollout_batch_size and not exhausted:
                fetched = data_source.get_samples(hooks.over_sampling_batch_size)
                exhausted = not fetched
                for bases in fetched:
                    pending[asyncio.ensure_future(_run_group(hub, options, bases))] = bases
                    remaining += 1
            if not pending:
                break
            done, _ = await asyncio.wait(set(pending), return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                bases = pending.pop(task)
                group = task.result()
                item = _Finished(
                    group,
                    bases,
                    [_samples(ep, b, options) for ep, b in zip(group.episodes, bases, strict=True)],
                )
                finished.append(item)
                if len(chosen) >= hooks.rollout_batch_size:
                    continue
                if not item.failed():
                    keep, reason = filter_decision(hooks, args, item.shaped(), remaining=remaining)
                    if not keep:
                        remaining -= 1
                        drops[reason or ""] += 1
                        continue
                chosen.append(item)
    finally:
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    chosen.sort(key=_Finished.index)
    fanned = any(item.forked() for item in chosen)
    batch = [item.shaped(nested=fanned) for item in chosen]
    metrics = _metrics([c.group for c in chosen], [c.per_episode for c in chosen])
    metrics["rollhub/groups_run"] = len(finished) + len(pending)
    metrics["rollhub/filtered"] = sum(drops.values())
    metrics.update({f"rollout/dynamic_filter/drop_{r}": n for r, n in drops.items() if r})
    if all(item.failed() for item in chosen):
        first = next((e.error for c in finished for e in c.group.episodes if e.error), None)
        raise RolloutFailed(
            f"no rollout of step {rollout_id} produced tokens to train on "
            f"({metrics['rollhub/episodes']} episodes); first error: "
            f"{first.type + ': ' + first.message if first else 'none recorded'}",
            rollout_id=rollout_id,
        )
    if hooks.sample_filter is not None:
        hooks.sample_filter(args, batch)
    if hooks.all_samples_process is not None:
        every = sorted(finished, key=_Finished.index)
        hooks.all_samples_process(args, [item.shaped() for item in every], data_source)
    if metrics["rollhub/dropped"]:
        _warn_default_post_process(args)
    return RolloutFnTrainOutput(samples=batch, metrics=metrics)


@dataclass
class _Finished:
    """A finished prompt group: the hub's group, slime's prompt samples, the new samples."""

    group: EpisodeGroup
    bases: list[Sample]
    per_episode: list[list[Sample]]

    def index(self) -> int:
        return _int(self.bases[0].index)

    def forked(self) -> bool:
        return any(len(s) > 1 for s in self.per_episode)

    def failed(self) -> bool:
        """Every rollout of the group is a placeholder: nothing in it trains."""
        return all(is_placeholder(s) for samples in self.per_episode for s in samples)

    def shaped(self, nested: bool | None = None) -> list[Sample] | list[list[Sample]]:
        """The group as slime's loop holds it: ``list[Sample]``, or one list per rollout
        when a rollout forked (``nested``: force either); every rollout is in it."""
        nest = self.forked() if nested is None else nested
        return list(self.per_episode) if nest else [s[0] for s in self.per_episode]


async def eval_rollout(
    hub: AsyncHub, options: SlimeOptions, args: Namespace, rollout_id: int
) -> RolloutFnEvalOutput:
    """Run slime's eval datasets (``--eval-prompt-data``, JSONL or Parquet) through ``hub``.

    Every dataset is checked before any rollout runs
    (:func:`~rollhub_slime.eval_options.check_eval_datasets`): its sampling fields
    (``temperature``, ``top_p``, ``top_k``, ``max_response_len``, ``stop``) are merged over
    ``[experiment] sampling`` for its own episodes, ``rm_type`` and ``metadata_overrides``
    reach the agent's payload, and fields naming slime's own generation or reward machinery
    (``custom_rm_path`` among them: slime never calls it when this rollout function
    replaces its loop) are refused.

    :returns: ``RolloutFnEvalOutput(data={name: {rewards, truncated, samples}})``; failed
        rollouts count with reward 0.
    :raises ConfigError: a dataset field rollhub cannot honour, or no eval dataset.
    """
    from slime.rollout.base_types import RolloutFnEvalOutput
    from slime.utils.types import Sample

    check_eval_datasets(args)
    data: dict[str, dict[str, Any]] = {}
    for cfg in getattr(args, "eval_datasets", None) or []:
        groups = eval_groups(cfg, args, Sample)
        sampling = eval_sampling(cfg)
        finished = await asyncio.gather(*(_run_group(hub, options, g, sampling) for g in groups))
        samples = [
            s
            for group, bases in zip(finished, groups, strict=True)
            for ep, base in zip(group.episodes, bases, strict=True)
            for s in episode_to_samples(ep, base, response_field=options.response_field)
        ]
        data[cfg.name] = {
            "rewards": [s.reward for s in samples],
            "truncated": [s.status == Sample.Status.TRUNCATED for s in samples],
            "samples": samples,
        }
    if not data:
        raise ConfigError(
            "evaluation was asked for but slime has no eval datasets; pass --eval-prompt-data "
            "NAME PATH (or --eval-config)",
            field="eval_prompt_data",
        )
    return RolloutFnEvalOutput(data=data, metrics={"rollhub/eval_step": rollout_id})


async def _run_group(
    hub: AsyncHub, options: SlimeOptions, bases: Sequence[Sample],
    sampling: dict[str, Any] | None = None,
) -> EpisodeGroup:
    """One slime prompt group (n copies of a prompt sample) as one hub group; ``sampling``
    is merged over ``[experiment] sampling`` for its episodes."""
    first = bases[0]
    payload = payload_of(first, prompt_field=options.prompt_field, label_field=options.label_field)
    group_id = _group_id(payload, hub, first)
    return await hub.run_group(payload, len(bases), group_id=group_id, sampling=sampling or None)


def _samples(episode: Episode, base: Sample, options: SlimeOptions) -> list[Sample]:
    return episode_to_samples(episode, base, response_field=options.response_field)


def _warn_default_post_process(args: Namespace) -> None:
    """Placeholders went to slime, whose default reward post-processing counts them."""
    path = getattr(args, "custom_reward_post_process_path", None)
    if path == REWARD_POST_PROCESS or "post_process" in _warned:
        return
    _warned.add("post_process")
    log.warning(
        "failed rollouts reach slime as placeholders (remove_sample, loss mask 0), but "
        "--custom-reward-post-process-path is %s: slime's own normalisation counts their "
        "reward in the group mean and std, moving the other rollouts' advantages; set it "
        "to %s (python -m rollhub_slime.launch does)", path, REWARD_POST_PROCESS,
    )


def _group_id(payload: dict[str, Any], hub: AsyncHub, sample: Sample) -> str:
    """A group id unique per slime prompt group: the payload id (if any) and group_index."""
    pid = payload.get(hub.config.experiment.id_field)
    group = getattr(sample, "group_index", None)
    base = str(pid) if pid not in (None, "") else "slime"
    return f"{base}-g{group}" if group is not None else f"{base}-i{sample.index}"


def _int(value: SupportsInt | None) -> int:
    return int(value) if value is not None else 0


def _metrics(finished: list[EpisodeGroup], per_group: list[list[list[Sample]]]) -> dict[str, Any]:
    episodes = [e for g in finished for e in g.episodes]
    rewards = [e.reward for e in episodes if e.ok and e.reward is not None]
    kept = [s for group in per_group for samples in group for s in samples]
    metrics: dict[str, Any] = {
        "rollhub/episodes": len(episodes),
        "rollhub/failed": sum(1 for e in episodes if not e.ok),
        "rollhub/forked": sum(1 for e in episodes if len(e.traces) > 1),
        "rollhub/samples": len(kept),
        "rollhub/dropped": sum(
            1 for group in per_group for s in group if all(is_placeholder(x) for x in s)
        ),
        "rollhub/turns_mean": sum(e.num_turns for e in episodes) / max(len(episodes), 1),
    }
    if rewards:  # slime hands metrics to its trackers, which take numbers only
        metrics["rollhub/reward_mean"] = sum(rewards) / len(rewards)
    return metrics
