"""Failed and empty rollouts still reach slime, as samples it accepts but does not learn from.

slime builds a training step's optimizer steps from the number of rollouts it is handed
(``slime/utils/dp_schedule.py::build_dp_schedule`` at 624b824: ``num_steps =
len(rollout_ids) // global_batch_size``, asserted ≥ 1, the remainder dropped), and its own
loop always hands over ``n_samples_per_prompt`` samples per prompt. With the usual
``global_batch_size = rollout_batch_size × n`` one missing rollout fails the step.
"""

from __future__ import annotations

import logging
from argparse import Namespace

from rollhub.episode import Episode, EpisodeGroup, ErrorInfo
from rollhub.trace import TraceRecord, TurnSpan
from rollhub_slime.rewards import post_process_rewards
from rollhub_slime.rollout import _Finished, _samples, _warn_default_post_process
from rollhub_slime.samples import episode_to_samples, is_placeholder
from rollhub_slime.settings import SlimeOptions

from tests.plugins.slime.slime_stand_ins import make_args


def bases(n: int, group: int = 0) -> list:
    from slime.utils.types import Sample

    out = []
    for i in range(n):
        s = Sample(prompt="q", label="a", metadata={})
        s.group_index, s.index = group, group * n + i
        out.append(s)
    return out


def rec(response: list[int], *, branch: int = 0, turn: int = 0) -> TraceRecord:
    return TraceRecord(
        session_id="s", branch_id=branch, prompt_ids=[1, 2, 3], response_ids=response,
        response_mask=[1] * len(response), response_logprobs=[-0.1] * len(response),
        turns=[TurnSpan(turn_index=turn, start=0, end=len(response))],
    )  # fmt: skip


def episode(i: int, reward: float | None, traces: list[TraceRecord], ok: bool = True) -> Episode:
    ep = Episode(
        episode_id=f"e{i}", group_id="g", session_id=f"s{i}", sample_index=i,
        status="ok" if ok else "agent_error", payload={}, reward=reward, traces=traces,
        error=None if ok else ErrorInfo("ValueError", "agent crashed before any model call"),
    )  # fmt: skip
    ep.trainable = ok and reward is not None
    return ep


def slime_num_steps(flat: list, global_batch_size: int) -> int:
    """slime's rule (dp_schedule.py): rollouts per step, asserted ≥ 1, remainder dropped."""
    rollouts = list(dict.fromkeys(s.rollout_id for s in flat))
    num_steps = len(rollouts) // global_batch_size
    assert num_steps >= 1, f"num_rollouts ({len(rollouts)}) < global_batch_size"
    assert len(rollouts) % global_batch_size == 0, "slime would drop trailing rollouts"
    return num_steps


def test_one_failed_rollout_keeps_the_step_at_batch_times_n():
    rewards = [0.0, 1.0, None, 1.0]
    eps = [episode(i, r, [rec([4, 5])] if r is not None else [], ok=r is not None)
           for i, r in enumerate(rewards)]  # fmt: skip
    item = _Finished(
        EpisodeGroup("g", {}, eps), bases(4),
        [_samples(e, b, SlimeOptions()) for e, b in zip(eps, bases(4), strict=True)],
    )  # fmt: skip
    flat = item.shaped()
    assert len(flat) == 4 and slime_num_steps(flat, global_batch_size=4) == 1
    failed = flat[2]
    assert is_placeholder(failed) and failed.remove_sample and not item.failed()
    assert (failed.tokens, failed.response_length, failed.loss_mask) == ([0, 0], 1, [0])
    assert failed.rollout_log_probs == [0.0] and failed.rollout_id == 2

    # the others' advantages are exactly those of the group without the failed rollout
    args = make_args()
    _, with_failed = post_process_rewards(args, flat)
    _, without = post_process_rewards(args, [s for s in flat if s is not failed])
    assert with_failed == [without[0], without[1], 0.0, without[2]]


def test_a_group_where_every_rollout_failed_is_placeholders():
    eps = [episode(i, None, [], ok=False) for i in range(2)]
    item = _Finished(
        EpisodeGroup("g", {}, eps), bases(2),
        [_samples(e, b, SlimeOptions()) for e, b in zip(eps, bases(2), strict=True)],
    )  # fmt: skip
    assert item.failed() and len(item.shaped()) == 2
    assert all(s.remove_sample and s.loss_mask == [0] for s in item.shaped())


def test_records_without_response_tokens_are_left_out_or_become_a_placeholder():
    # a sub-agent's first call aborted with 0 tokens: the gateway records response_ids=[]
    ep = episode(0, 1.0, [rec([4, 5]), rec([], branch=1, turn=1)])
    [s] = episode_to_samples(ep, bases(1)[0])
    assert s.response_length == 2 and not s.remove_sample
    empty = episode(1, 1.0, [rec([])])
    [p] = episode_to_samples(empty, bases(1)[0])
    assert is_placeholder(p) and p.remove_sample and p.response_length == 1


def test_placeholders_under_slimes_default_post_process_are_warned_about(caplog):
    from rollhub_slime import rollout

    rollout._warned.clear()
    with caplog.at_level(logging.WARNING, logger="rollhub_slime.rollout"):
        _warn_default_post_process(Namespace(custom_reward_post_process_path=None))
        _warn_default_post_process(Namespace(custom_reward_post_process_path=None))
    assert len(caplog.records) == 1 and "group mean and std" in caplog.text
    rollout._warned.clear()
    caplog.clear()
    launched = "rollhub_slime.rewards.post_process_rewards"
    _warn_default_post_process(Namespace(custom_reward_post_process_path=launched))
    assert not caplog.records
