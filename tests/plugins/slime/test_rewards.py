"""GRPO reward post-processing: per group, each rollout counted once, fan-out included."""

from __future__ import annotations

import math

import pytest
from rollhub.errors import ConfigError
from rollhub_slime.rewards import EPS, post_process_rewards

from tests.plugins.slime.conftest import make_args


def sample(group, rollout, reward, *, index=None, removed=False):
    from slime.utils.types import Sample

    return Sample(
        group_index=group,
        index=rollout if index is None else index,
        rollout_id=rollout,
        reward=reward,
        remove_sample=removed,
    )


def grpo(values):
    """Mean and sample std (n - 1) of a group, as slime's torch code computes them."""
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    return mean, std


def test_plain_groups_match_slime_default():
    samples = [sample(0, 0, 1.0), sample(0, 1, 0.0), sample(1, 2, 0.5), sample(1, 3, 1.5)]
    raw, out = post_process_rewards(make_args(), samples)
    assert raw == [1.0, 0.0, 0.5, 1.5]
    m0, s0 = grpo([1.0, 0.0])
    m1, s1 = grpo([0.5, 1.5])
    assert out == pytest.approx(
        [
            (1.0 - m0) / (s0 + EPS),
            (0.0 - m0) / (s0 + EPS),
            (0.5 - m1) / (s1 + EPS),
            (1.5 - m1) / (s1 + EPS),
        ]
    )


def test_fan_out_counts_each_rollout_once():
    # group 0: rollout 0 forked into three samples (reward 1), rollouts 1 and 2 gave one each
    samples = [
        sample(0, 0, 1.0, index=0),
        sample(0, 0, 1.0, index=0),
        sample(0, 0, 1.0, index=0),
        sample(0, 1, 0.0),
        sample(0, 2, 0.0),
        sample(1, 3, 1.0),
        sample(1, 4, 1.0),
    ]
    raw, out = post_process_rewards(make_args(), samples)
    mean, std = grpo([1.0, 0.0, 0.0])  # three rollouts, not five samples
    assert mean == pytest.approx(1 / 3)
    winner, loser = (1.0 - mean) / (std + EPS), (0.0 - mean) / (std + EPS)
    assert out[:5] == pytest.approx([winner] * 3 + [loser] * 2)
    assert out[5:] == [0.0, 0.0]  # equal rewards: no advantage
    # slime's default would have pooled the batch (7 != n * B); a per-sample mean differs
    assert mean != pytest.approx(sum(raw[:5]) / 5)


def test_removed_samples_get_zero_and_stay_out_of_the_statistics():
    samples = [sample(0, 0, 1.0), sample(0, 1, 0.0), sample(0, 2, 0.0, removed=True)]
    _, out = post_process_rewards(make_args(), samples)
    mean, std = grpo([1.0, 0.0])
    assert out == pytest.approx([(1 - mean) / (std + EPS), (0 - mean) / (std + EPS), 0.0])


def test_switches_follow_slime():
    samples = [sample(0, 0, 1.0), sample(0, 1, 0.0), sample(0, 2, 0.5)]
    centred = [0.5, -0.5, 0.0]
    for estimator in ("reinforce_plus_plus_baseline",):
        _, out = post_process_rewards(make_args(advantage_estimator=estimator), samples)
        assert out == pytest.approx(centred)
    _, out = post_process_rewards(make_args(grpo_std_normalization=False), samples)
    assert out == pytest.approx(centred)
    for args in (make_args(rewards_normalization=False), make_args(advantage_estimator="ppo")):
        raw, out = post_process_rewards(args, samples)
        assert raw == out == [1.0, 0.0, 0.5]
    for estimator in ("gspo", "cispo"):
        _, scaled = post_process_rewards(make_args(advantage_estimator=estimator), samples)
        assert scaled == pytest.approx([c / (0.5 + EPS) for c in centred])


def test_single_rollout_group_and_missing_ids():
    _, out = post_process_rewards(make_args(), [sample(0, 0, 1.0)])
    assert out == [0.0]
    loose = [sample(None, None, 1.0), sample(None, None, 0.0)]
    _, out = post_process_rewards(make_args(), loose)
    assert out == [0.0, 0.0]  # no group index: each sample is its own group


def test_dict_rewards_use_the_reward_key():
    samples = [sample(0, 0, {"acc": 1.0, "len": 3}), sample(0, 1, {"acc": 0.0, "len": 1})]
    raw, _ = post_process_rewards(make_args(reward_key="acc"), samples)
    assert raw == [1.0, 0.0]
    with pytest.raises(
        ConfigError, match=r"dict reward with keys \['acc', 'len'\]; set --reward-key"
    ):
        post_process_rewards(make_args(), samples)


def test_missing_reward_is_an_error():
    with pytest.raises(ConfigError, match="sample 0 has no reward"):
        post_process_rewards(make_args(), [sample(0, 0, None)])
