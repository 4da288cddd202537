"""Stitching rllm-model-gateway's per-call traces into rollhub records."""

from __future__ import annotations

import pytest
from rollhub.errors import TokenRetrievalError
from rollhub_rllm.traces import answered, stitch


def trace(n: int, prompt: list[int], completion: list[int], finish: str | None = "stop", **kw):
    """One stored trace as ``GET /sessions/{sid}/traces`` returns it."""
    return {
        "trace_id": f"t{n}", "session_id": "g", "model": "m", "messages": [],
        "prompt_token_ids": prompt, "response_message": {}, "completion_token_ids": completion,
        "logprobs": [-0.1 * (i + 1) - n for i in range(len(completion))], "finish_reason": finish,
        "timestamp": float(n), **kw,
    }  # fmt: skip


def test_calls_that_extend_each_other_make_one_record():
    traces = [
        trace(0, [1, 2, 3], [10, 11], "tool_calls"),
        trace(1, [1, 2, 3, 10, 11, 50, 51], [12], "tool_calls"),
        trace(2, [1, 2, 3, 10, 11, 50, 51, 12, 52], [13, 14], "stop"),
    ]
    (record,) = stitch("s", traces, weight_version=4)
    assert record.prompt_ids == [1, 2, 3]
    assert record.response_ids == [10, 11, 50, 51, 12, 52, 13, 14]
    assert record.response_mask == [1, 1, 0, 0, 1, 0, 1, 1]
    assert record.response_logprobs == [-0.1, -0.2, 0.0, 0.0, -1.1, 0.0, -2.1, -2.2]
    assert [(t.start, t.end, t.finish_reason) for t in record.turns] == [
        (0, 2, "tool_calls"), (4, 5, "tool_calls"), (6, 8, "stop"),
    ]  # fmt: skip
    assert record.weight_versions == [4, 4, 4] and record.finish_reason == "stop"
    assert record.metadata["trace_ids"] == ["t0", "t1", "t2"]
    assert record.model_id == "m"
    # every call's (prompt, completion, logprobs) comes back exactly
    assert [(c.prompt_ids, c.completion_ids, c.logprobs) for c in record.calls()] == [
        (t["prompt_token_ids"], t["completion_token_ids"], t["logprobs"]) for t in traces
    ]


def test_an_edited_history_forks_a_new_record():
    traces = [
        trace(0, [1, 2], [10]),
        trace(1, [1, 2, 10, 50], [11]),
        trace(2, [1, 2, 99], [12]),  # the agent rewrote turn 0's reply
    ]
    first, second = stitch("s", traces)
    assert (second.branch_id, second.parent_branch_id, second.fork_turn) == (1, 0, 2)
    assert second.prompt_ids == [1, 2, 99] and second.response_ids == [12]
    assert [t.drift for t in second.turns] == ["fork"]
    assert first.response_ids == [10, 50, 11]  # the sampled tokens stay where they were
    assert first.metadata["drift"] == {"append": 1, "fork": 1}


def test_interleaved_sub_agents_each_grow_their_own_record():
    traces = [
        trace(0, [1, 2], [10]),
        trace(1, [7, 8], [20]),
        trace(2, [1, 2, 10, 3], [11]),
        trace(3, [7, 8, 20, 9], [21]),
    ]
    a, b = stitch("s", traces)
    assert [t.turn_index for t in a.turns] == [0, 2] and a.response_ids == [10, 3, 11]
    assert [t.turn_index for t in b.turns] == [1, 3] and b.response_ids == [20, 9, 21]
    assert b.parent_branch_id == 0 and b.fork_turn == 1


def test_error_replies_are_skipped():
    error = trace(1, [], [], None, raw_response={"error": {"message": "bad"}})
    assert not answered(error)
    (record,) = stitch("s", [trace(0, [1], [2]), error, trace(2, [1, 2, 3], [4])])
    assert [t.turn_index for t in record.turns] == [0, 1]
    assert stitch("s", []) == []


@pytest.mark.parametrize(
    ("bad", "field", "match"),
    [
        ({"prompt_token_ids": []}, "prompt_token_ids", "has no prompt_token_ids.*vLLM"),
        ({"completion_token_ids": []}, "completion_token_ids", "has no completion_token_ids"),
        ({"logprobs": None}, "logprobs", "2 completion ids but none logprobs"),
        ({"logprobs": [-1.0]}, "logprobs", "2 completion ids but 1 logprobs"),
    ],
)
def test_a_trace_without_usable_ids_is_a_clear_error(bad, field, match):
    broken = {**trace(0, [1, 2], [3, 4]), **bad}
    with pytest.raises(TokenRetrievalError, match=match) as err:
        stitch("sess", [broken])
    assert err.value.field == field and err.value.session_id == "sess"
    assert "session 'sess' call 0 (trace 't0')" in str(err.value)
