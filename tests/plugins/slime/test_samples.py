"""Episode → slime Sample, field by field, for every kind of episode the hub produces."""

from __future__ import annotations

import copy

import pytest
from rollhub.episode import Episode, ErrorInfo
from rollhub.errors import ConfigError
from rollhub.trace import TraceRecord, TurnSpan
from rollhub_slime.samples import episode_to_samples, payload_of, sample_status


def base_sample():
    from slime.utils.types import Sample

    return Sample(
        group_index=7,
        index=15,
        prompt="What is 2 + 3?",
        label="5",
        metadata={"id": "q1", "mode": "tool"},
    )


def episode(status="ok", traces=(), reward=1.0, **kw) -> Episode:
    return Episode(
        episode_id="q1-g7-0-abc",
        group_id="q1-g7",
        session_id="q1-g7-0-abc",
        sample_index=0,
        status=status,
        result=kw.pop("result", {"final_message": "The sum is 5.", "rewards": reward}),
        reward=reward,
        reward_components={"result": reward} if reward is not None else {},
        traces=list(traces),
        weight_version=kw.pop("weight_version", 4),
        **kw,
    )


def record(response, mask, turns, *, prompt=(1, 2, 3), branch=0, finish="stop", **kw):
    lps = [(-0.1 * (i + 1) if m else 0.0) for i, m in enumerate(mask)]
    return TraceRecord(
        session_id="q1-g7-0-abc",
        branch_id=branch,
        prompt_ids=list(prompt),
        response_ids=list(response),
        response_mask=list(mask),
        response_logprobs=lps,
        turns=[TurnSpan(**t) for t in turns],
        finish_reason=finish,
        **kw,
    )


def test_single_turn_episode_fills_every_field():
    from slime.utils.types import Sample

    base = base_sample()
    before = copy.deepcopy(base)
    rec = record(
        [10, 11, 12],
        [1, 1, 1],
        [{"turn_index": 0, "start": 0, "end": 3, "weight_version": 4}],
        metadata={"drift": {"append": 1}},
    )
    [s] = episode_to_samples(episode(traces=[rec]), base)

    assert s is not base and base == before  # the prompt sample is not touched
    assert s.tokens == [1, 2, 3, 10, 11, 12]
    assert s.response_length == 3
    assert s.loss_mask == [1, 1, 1]
    assert s.rollout_log_probs == pytest.approx([-0.1, -0.2, -0.3])
    assert s.reward == 1.0 and isinstance(s.reward, float)
    assert s.status is Sample.Status.COMPLETED
    assert (s.group_index, s.index, s.rollout_id) == (7, 15, 15)
    assert (s.prompt, s.label) == ("What is 2 + 3?", "5")
    assert s.weight_versions == ["4"]
    assert s.session_id == "q1-g7-0-abc"
    assert s.remove_sample is False
    assert s.response == "The sum is 5."
    assert s.metadata["id"] == "q1" and s.metadata["mode"] == "tool"
    meta = s.metadata["rollhub"]
    assert meta["episode_id"] == "q1-g7-0-abc" and meta["group_id"] == "q1-g7"
    assert meta["episode_status"] == "ok" and meta["errors"] == []
    assert meta["drift"] == {"append": 1} and meta["num_records"] == 1
    assert meta["branch_id"] == 0 and meta["parent_branch_id"] is None
    assert meta["weight_version"] == 4 and meta["reward_components"] == {"result": 1.0}
    # untouched fields keep slime's defaults
    assert s.rollout_top_p_token_ids is None and s.teacher_log_probs is None


def test_multi_turn_tool_episode_masks_tool_tokens():
    # turn 0 samples 3 tokens, the tool result adds 2, turn 1 samples 2
    rec = record(
        [10, 11, 12, 50, 51, 13, 14],
        [1, 1, 1, 0, 0, 1, 1],
        [
            {
                "turn_index": 0,
                "start": 0,
                "end": 3,
                "finish_reason": "tool_calls",
                "weight_version": 4,
            },
            {"turn_index": 1, "start": 5, "end": 7, "weight_version": 5},
        ],
    )
    [s] = episode_to_samples(episode(traces=[rec]), base_sample())
    assert s.tokens == [1, 2, 3, 10, 11, 12, 50, 51, 13, 14]
    assert s.response_length == 7 == len(s.loss_mask) == len(s.rollout_log_probs)
    assert s.loss_mask == [1, 1, 1, 0, 0, 1, 1]
    assert s.rollout_log_probs[3:5] == [0.0, 0.0]  # tool tokens carry no logprob
    assert s.rollout_log_probs[5] == pytest.approx(-0.6)
    assert s.weight_versions == ["4", "5"]
    assert s.metadata["rollhub"]["num_turns"] == 2


def test_forked_episode_fans_out_with_one_rollout_id():
    from slime.utils.types import Sample

    first = record([10, 11], [1, 1], [{"turn_index": 0, "start": 0, "end": 2, "weight_version": 4}])
    forked = record(
        [20, 21, 22],
        [1, 1, 1],
        [{"turn_index": 1, "start": 0, "end": 3, "drift": "fork", "weight_version": 4}],
        prompt=(1, 2, 9),
        branch=1,
        parent_branch_id=0,
        fork_turn=1,
        metadata={"drift": {"append": 1, "fork": 1}},
    )
    samples = episode_to_samples(episode(traces=[forked, first]), base_sample(), rollout_id=99)
    assert [s.tokens for s in samples] == [[1, 2, 3, 10, 11], [1, 2, 9, 20, 21, 22]]
    assert [s.response_length for s in samples] == [2, 3]
    assert [s.rollout_id for s in samples] == [99, 99]
    assert [s.reward for s in samples] == [1.0, 1.0]  # each segment carries the full reward
    assert [s.status for s in samples] == [Sample.Status.COMPLETED] * 2
    assert [s.index for s in samples] == [15, 15] and [s.group_index for s in samples] == [7, 7]
    assert [s.response for s in samples] == ["", "The sum is 5."]  # text on the last segment
    m0, m1 = (s.metadata["rollhub"] for s in samples)
    assert (m0["branch_id"], m1["branch_id"]) == (0, 1)
    assert (m1["parent_branch_id"], m1["fork_turn"]) == (0, 1)
    assert m1["drift"] == {"append": 1, "fork": 1} and m0["num_records"] == 2


def test_truncated_episode():
    from slime.utils.types import Sample

    rec = record(
        [10, 11, 12, 13],
        [1, 1, 1, 1],
        [{"turn_index": 0, "start": 0, "end": 4, "finish_reason": "length"}],
        finish="length",
    )
    [s] = episode_to_samples(episode(traces=[rec], reward=0.0), base_sample())
    assert s.status is Sample.Status.TRUNCATED
    assert s.reward == 0.0 and s.remove_sample is False
    assert s.weight_versions == []  # no version was reported for the turn
    assert s.loss_mask == [1, 1, 1, 1]


def test_aborted_by_the_engine_and_cancelled():
    from slime.utils.types import Sample

    rec = record(
        [10, 11],
        [1, 1],
        [{"turn_index": 0, "start": 0, "end": 2, "finish_reason": "abort"}],
        finish="abort",
    )
    [s] = episode_to_samples(episode(traces=[rec], reward=0.0), base_sample())
    assert s.status is Sample.Status.ABORTED and s.tokens == [1, 2, 3, 10, 11]

    cancelled = episode(status="cancelled", reward=None, result=None)
    [c] = episode_to_samples(cancelled, base_sample())
    assert c.status is Sample.Status.ABORTED
    assert (c.tokens, c.response_length, c.loss_mask, c.rollout_log_probs) == (
        [0, 0], 1, [0], [0.0]
    )
    assert c.remove_sample is True and c.reward == 0.0


def test_failed_episode_without_tokens():
    from slime.utils.types import Sample

    failed = episode(
        status="agent_error",
        reward=None,
        result=None,
        error=ErrorInfo("RuntimeError", "agent failed on purpose", None),
    )
    failed.trainable = False
    [s] = episode_to_samples(failed, base_sample())
    assert s.status is Sample.Status.FAILED
    # slime's own placeholder: two tokens, one of response, nothing learnt
    assert (s.tokens, s.response_length, s.loss_mask, s.rollout_log_probs) == (
        [0, 0], 1, [0], [0.0]
    )
    assert s.reward == 0.0 and s.remove_sample is True
    assert s.response == "" and s.weight_versions == []
    assert (s.group_index, s.index, s.rollout_id) == (7, 15, 15)
    meta = s.metadata["rollhub"]
    assert meta["episode_status"] == "agent_error" and meta["num_records"] == 0
    assert meta["errors"] == [
        {"type": "RuntimeError", "message": "agent failed on purpose", "traceback": None}
    ]
    for status in ("timeout", "submit_error"):
        assert sample_status(episode(status=status), None) == "FAILED"


def test_error_finish_and_untrainable_episodes():
    from slime.utils.types import Sample

    rec = record([10], [1], [{"turn_index": 0, "start": 0, "end": 1}], finish="error")
    [s] = episode_to_samples(episode(traces=[rec]), base_sample())
    assert s.status is Sample.Status.FAILED

    ok = record([10], [1], [{"turn_index": 0, "start": 0, "end": 1}])
    dropped = episode(traces=[ok], reward=1.0)
    dropped.trainable = False  # e.g. [rewards] on_failure = "drop_group" and a sibling failed
    [d] = episode_to_samples(dropped, base_sample())
    assert d.remove_sample is True and d.reward == 1.0 and d.status is Sample.Status.COMPLETED


def test_missing_reward_is_left_to_slime_only_when_asked():
    ok = record([10], [1], [{"turn_index": 0, "start": 0, "end": 1}])
    [kept] = episode_to_samples(
        episode(traces=[ok], reward=None), base_sample(), keep_missing_reward=True
    )
    assert kept.reward is None and kept.remove_sample is False  # slime's reward model runs
    [zero] = episode_to_samples(episode(traces=[ok], reward=None), base_sample())
    assert zero.reward == 0.0 and zero.remove_sample is True


def test_imputed_reward_is_marked():
    ok = record([10], [1], [{"turn_index": 0, "start": 0, "end": 1}])
    ep = episode(traces=[ok], reward=0.0)
    ep.metrics["reward_imputed"] = True
    [s] = episode_to_samples(ep, base_sample())
    assert s.metadata["rollhub"]["reward_imputed"] is True and s.remove_sample is False


def test_payload_of_a_prompt_sample():
    from slime.utils.types import Sample

    s = base_sample()
    assert payload_of(s) == {"id": "q1", "mode": "tool", "prompt": "What is 2 + 3?", "label": "5"}
    assert payload_of(s, prompt_field="question", label_field="answer") == {
        "id": "q1",
        "mode": "tool",
        "question": "What is 2 + 3?",
        "answer": "5",
    }
    own = Sample(prompt="p", metadata={"prompt": "kept", "rollhub": {"old": 1}})
    assert payload_of(own) == {"prompt": "kept"}  # metadata wins; old rollhub info is dropped
    with pytest.raises(ConfigError, match=r"Sample\.metadata must be a mapping.*--metadata-key"):
        payload_of(Sample(prompt="p", metadata=["not", "a", "dict"]))
