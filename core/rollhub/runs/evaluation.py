"""Scoring a policy on held-out prompts: pass@1, pass@k, reward, tool use, failures.

:func:`evaluate` runs ``n`` samples of each prompt through a started hub, with whatever
policy its token source samples from at that moment (the base weights, a checkpoint's, a
model endpoint), and summarises them in an :class:`EvalReport`. ``rollhub eval`` and a
training run's before/after evaluation (``[eval]``) both use it.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from rollhub.episode import Episode, pass_at_k
from rollhub.hubs.view import HubView
from rollhub.policies import PolicyConfig, policy_episode, reports_figures, takes_part
from rollhub.runs.intervals import bootstrap_mean, wilson

__all__ = ["EvalReport", "evaluate", "pass_at_1_interval", "summarize_episodes"]


@dataclass
class EvalReport:
    """One policy's scores on one prompt set.

    :param label: what was evaluated ("base", "step 12", a checkpoint path, a model name).
    :param k: the samples per prompt; ``pass_at_k`` is pass@k for this k.
    :param pass_at_1_ci: the 95% interval of pass@1 (:func:`pass_at_1_interval`).
    :param reward_mean_ci: the 95% bootstrap interval of the mean reward, resampling prompts.
    :param failures: episodes that did not end ``ok``, counted by cause (status, error type).
    :param splits: the same figures per split (the prompts' ``[eval] split_field``), when
        the prompts carry one.
    :param by_prompt: per prompt: its split, which samples solved it (1/0, a failed episode
        0) and the rewards of its ``ok`` episodes (what ``rollhub compare`` pairs runs by).
    :param policies: with ``[[policies]]``, the same figures per policy, each over the
        episodes it took part in (:func:`~rollhub.policies.takes_part`), its own records and
        scored by its own reward (``reward_key``), with its own ``by_prompt``; none for a
        frozen policy that sampled nothing (:func:`~rollhub.policies.reports_figures`).
    """

    label: str
    prompts: int
    samples: int
    k: int
    pass_at_1: float
    pass_at_k: float
    reward_mean: float | None
    tool_call_rate: float
    turns_mean: float
    failures: dict[str, int] = field(default_factory=dict)
    weight_version: int | None = None
    elapsed_s: float = 0.0
    pass_at_1_ci: tuple[float, float] = (0.0, 1.0)
    reward_mean_ci: tuple[float, float] | None = None
    splits: dict[str, dict[str, Any]] = field(default_factory=dict)
    by_prompt: dict[str, dict[str, Any]] = field(default_factory=dict)
    policies: dict[str, dict[str, Any]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)


def pass_at_1_interval(solved: Sequence[Sequence[int]]) -> tuple[float, float]:
    """The 95% interval of pass@1 from each prompt's solved samples (1/0 per sample).

    A prompt's samples are not independent of each other (an easy prompt is solved by most
    of them), so the interval resamples prompts (:func:`bootstrap_mean`); with a handful of
    prompts that understates the spread, so it is never narrower than the Wilson interval
    over the samples.
    """
    flat = [x for g in solved for x in g]
    lo, hi = wilson(sum(flat), len(flat))
    if sum(1 for g in solved if g) < 2:
        return lo, hi
    b_lo, b_hi = bootstrap_mean(solved)
    return min(lo, b_lo), max(hi, b_hi)


def _figures(
    by_prompt: Mapping[str, Sequence[Episode]], k: int, success_threshold: float
) -> dict[str, Any]:
    """Every figure of a report over these prompts (a failed episode counts as not solved,
    so pass@k never rises by dropping failures)."""
    episodes = [e for group in by_prompt.values() for e in group]
    ok = [e for e in episodes if e.ok]
    solved = {key: sum(e.solved(success_threshold) for e in g) for key, g in by_prompt.items()}
    p1 = [pass_at_k(len(g), solved[key], 1) for key, g in by_prompt.items() if g]
    pk = [pass_at_k(len(g), solved[key], min(k, len(g))) for key, g in by_prompt.items() if g]
    rewards = [[float(e.reward) for e in g if e.ok and e.reward is not None]
               for g in by_prompt.values()]
    flat = [r for g in rewards for r in g]
    failures = Counter(
        f"{e.status}:{e.error.type}" if e.error else str(e.status) for e in episodes if not e.ok
    )
    lo, hi = pass_at_1_interval(
        [[int(e.solved(success_threshold)) for e in g] for g in by_prompt.values()]
    )
    reward_ci = bootstrap_mean(rewards) if flat else None
    return {
        "prompts": len(by_prompt),
        "samples": len(episodes),
        "pass_at_1": round(sum(p1) / len(p1), 4) if p1 else 0.0,
        "pass_at_1_ci": (round(lo, 4), round(hi, 4)),
        "pass_at_k": round(sum(pk) / len(pk), 4) if pk else 0.0,
        "reward_mean": round(sum(flat) / len(flat), 4) if flat else None,
        "reward_mean_ci": (round(reward_ci[0], 4), round(reward_ci[1], 4)) if reward_ci else None,
        "tool_call_rate": round(sum(e.num_tool_call_turns > 0 for e in ok) / len(ok), 4)
        if ok else 0.0,
        "turns_mean": round(sum(e.num_turns for e in ok) / len(ok), 3) if ok else 0.0,
        "failures": dict(failures),
    }


def summarize_episodes(
    label: str, by_prompt: Mapping[str, Sequence[Episode]], k: int,
    weight_version: int | None = None, elapsed_s: float = 0.0, success_threshold: float = 1.0,
    split_field: str | None = "split", policies: Sequence[PolicyConfig] = (),
) -> EvalReport:
    """The report of finished episodes grouped by prompt, with per-split figures when the
    prompts' payloads carry ``split_field``, and per-policy figures for ``policies``."""
    split_of = {
        key: str(g[0].payload.get(split_field)) if g and split_field
        and g[0].payload.get(split_field) is not None else None
        for key, g in by_prompt.items()
    }
    splits = {}
    for name in sorted({s for s in split_of.values() if s is not None}):
        part = {key: g for key, g in by_prompt.items() if split_of[key] == name}
        splits[name] = _figures(part, k, success_threshold)
    detail = {
        key: {
            "split": split_of[key],
            "solved": [int(e.solved(success_threshold)) for e in g],
            "rewards": [float(e.reward) for e in g if e.ok and e.reward is not None],
        }
        for key, g in by_prompt.items()
    }
    per_policy = {}
    everything = [e for g in by_prompt.values() for e in g]
    for policy in policies:
        if not reports_figures(policy, everything):
            continue  # a frozen policy that sampled nothing (a judge): no figures of its own
        # each policy is scored over the episodes it took part in, as training sees them
        seen = {key: [policy_episode(e, policy) for e in g if takes_part(e, policy)]
                for key, g in by_prompt.items()}
        per_policy[policy.name] = {
            **_figures(seen, k, success_threshold),
            "reward_key": policy.reward_key,
            "by_prompt": {key: {"split": split_of[key],
                                "solved": [int(e.solved(success_threshold)) for e in g]}
                          for key, g in seen.items()},
        }
    return EvalReport(
        label=label, k=k, weight_version=weight_version, elapsed_s=round(elapsed_s, 2),
        splits=splits, by_prompt=detail, policies=per_policy,
        **_figures(by_prompt, k, success_threshold),
    )


async def evaluate(
    hub: HubView,
    payloads: Sequence[Mapping[str, Any]],
    n: int,
    *,
    label: str,
    keep: list[Episode] | None = None,
) -> EvalReport:
    """Run ``n`` samples of every prompt through ``hub`` and score them (per split, by
    ``[eval] split_field``); the episodes are appended to ``keep`` when it is given."""
    t0 = time.monotonic()
    by_prompt: dict[str, list[Episode]] = {}
    async for group in hub.iter_groups(payloads, n):
        by_prompt[group.group_id] = list(group.episodes)
        if keep is not None:
            keep.extend(group.episodes)
    return summarize_episodes(
        label, by_prompt, n, hub.weight_version, time.monotonic() - t0,
        success_threshold=hub.config.rewards.success_threshold,
        split_field=hub.config.eval.split_field, policies=hub.config.policies,
    )
