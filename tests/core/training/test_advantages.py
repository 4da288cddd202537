"""Advantage estimators against hand-computed values, and the failure policy before them."""

from __future__ import annotations

import math

import pytest
from rollhub.episode import Episode, EpisodeGroup
from rollhub.errors import ConfigError
from rollhub.scoring.rewards import apply_failure_policy
from rollhub.training.advantages import (
    group_advantages,
    grpo_advantages,
    grpo_mean_advantages,
    rloo_advantages,
)


def test_grpo_normalises_by_population_std():
    # mean 0.5, population std 0.5 → ±1 (up to eps)
    got = grpo_advantages([1.0, 0.0, 1.0, 0.0])
    assert got == pytest.approx([1.0, -1.0, 1.0, -1.0], abs=1e-5)
    # mean 2, std sqrt(2/3)
    got = grpo_advantages([1.0, 2.0, 3.0], eps=0.0)
    s = math.sqrt(2 / 3)
    assert got == pytest.approx([-1 / s, 0.0, 1 / s])


def test_grpo_equal_rewards_give_zero_not_nan():
    assert grpo_advantages([0.7, 0.7, 0.7]) == [0.0, 0.0, 0.0]
    assert grpo_advantages([]) == []


def test_grpo_mean_has_no_std_division():
    assert grpo_mean_advantages([1.0, 2.0, 3.0, 6.0]) == [-2.0, -1.0, 0.0, 3.0]


def test_rloo_leave_one_out_baseline():
    # r = [1, 0, 0, 1]: baselines 1/3, 2/3, 2/3, 1/3
    assert rloo_advantages([1.0, 0.0, 0.0, 1.0]) == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3])
    # equals n/(n-1) · (r - mean)
    r = [3.0, 1.0, 4.0, 1.0, 5.0]
    mean = sum(r) / 5
    assert rloo_advantages(r) == pytest.approx([5 / 4 * (x - mean) for x in r])
    assert rloo_advantages([2.0]) == [0.0]


def _group(rewards: list[float | None], statuses: list[str] | None = None) -> EpisodeGroup:
    statuses = statuses or ["ok" if r is not None else "agent_error" for r in rewards]
    eps = [
        Episode(f"e{i}", "g", f"e{i}", i, st, reward=r)  # type: ignore[arg-type]
        for i, (r, st) in enumerate(zip(rewards, statuses, strict=True))
    ]
    return EpisodeGroup("g", {}, eps)


def test_failed_episode_gets_no_advantage_under_exclude_episode():
    g = _group([1.0, None, 0.0, 1.0])
    apply_failure_policy(g, "exclude_episode")
    adv = group_advantages(g, "grpo_mean")
    assert set(adv) == {"e0", "e2", "e3"}  # e1 failed: no entry, so no gradient at all
    assert adv == pytest.approx({"e0": 1 / 3, "e2": -2 / 3, "e3": 1 / 3})


def test_drop_group_policy_leaves_no_advantages():
    g = _group([1.0, None, 0.0])
    apply_failure_policy(g, "drop_group")
    assert group_advantages(g, "grpo") == {}


def test_zero_reward_policy_trains_the_failure_as_zero():
    g = _group([1.0, None, 1.0])
    apply_failure_policy(g, "zero_reward")
    adv = group_advantages(g, "rloo")
    assert adv == pytest.approx({"e0": 0.5, "e1": -1.0, "e2": 0.5})


def test_unknown_estimator_names_the_field():
    with pytest.raises(ConfigError, match=r"training\.advantage.*grpo, grpo_mean, rloo"):
        group_advantages(_group([1.0]), "ppo")
