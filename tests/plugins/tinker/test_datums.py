"""Episode → Datum, element by element: shift, masks, advantages, logprobs, forks, budgets."""

from __future__ import annotations

import pytest
from rollhub.episode import Episode
from rollhub.trace import TraceRecord, TurnSpan
from rollhub_tinker.datums import episode_datums, record_arrays, to_tinker


def _record(prompt, response, mask, lps, branch=0) -> TraceRecord:
    return TraceRecord(
        session_id="s",
        branch_id=branch,
        prompt_ids=prompt,
        response_ids=response,
        response_mask=mask,
        response_logprobs=lps,
        turns=[TurnSpan(turn_index=0, start=0, end=len(response))],
    )


def _episode(*records: TraceRecord, eid: str = "e0") -> Episode:
    return Episode(eid, "g", eid, 0, "ok", reward=1.0, traces=list(records))


def test_single_turn_shift_logprobs_and_advantages():
    rec = _record([1, 2, 3], [10, 11, 12], [1, 1, 1], [-0.1, -0.2, -0.3])
    a = record_arrays(rec, 0.5, episode_id="e0")
    assert a.model_input == [1, 2, 3, 10, 11]
    assert a.target_tokens == [2, 3, 10, 11, 12]
    assert a.logprobs == [0.0, 0.0, -0.1, -0.2, -0.3]
    assert a.advantages == [0.0, 0.0, 0.5, 0.5, 0.5]
    assert a.trained_tokens == 3


def test_multi_turn_tool_tokens_are_never_trained():
    # turn 0 samples [10, 11]; the tool result [20, 21] comes from the environment; turn 1 [12]
    rec = _record([1, 2], [10, 11, 20, 21, 12], [1, 1, 0, 0, 1], [-0.1, -0.2, 0.0, 0.0, -0.3])
    a = record_arrays(rec, -1.5, episode_id="e0")
    assert a.model_input == [1, 2, 10, 11, 20, 21]
    assert a.target_tokens == [2, 10, 11, 20, 21, 12]
    assert a.logprobs == [0.0, -0.1, -0.2, 0.0, 0.0, -0.3]
    assert a.advantages == [0.0, -1.5, -1.5, 0.0, 0.0, -1.5]
    # every trained target is exactly a sampled token, shifted by one
    full = rec.full_ids
    for j, adv in enumerate(a.advantages):
        if adv:
            r = j + 1 - len(rec.prompt_ids)
            assert rec.response_mask[r] == 1 and a.target_tokens[j] == full[j + 1]


def test_forks_become_separate_datums_and_zero_advantage_is_skipped():
    main = _record([1, 2], [10, 11], [1, 1], [-0.1, -0.2])
    fork = _record([1, 2, 10, 7], [12, 13], [1, 1], [-0.3, -0.4], branch=1)
    arrays, stats = episode_datums([(_episode(main, fork), 1.0), (_episode(main, eid="e1"), 0.0)])
    assert [(a.episode_id, a.branch_id) for a in arrays] == [("e0", 0), ("e0", 1)]
    assert arrays[1].model_input == [1, 2, 10, 7, 12]
    assert arrays[1].target_tokens == [2, 10, 7, 12, 13]
    assert arrays[1].logprobs == [0.0, 0.0, 0.0, -0.3, -0.4]
    assert stats.datums == 2 and stats.trained_tokens == 4
    arrays, _ = episode_datums([(_episode(main, eid="e1"), 0.0)], skip_zero_advantage=False)
    assert len(arrays) == 1 and arrays[0].advantages == [0.0, 0.0, 0.0]


def test_length_budget_cuts_explicitly_and_counts():
    rec = _record([1, 2, 3], [10, 11, 12], [1, 1, 1], [-0.1, -0.2, -0.3])
    arrays, stats = episode_datums([(_episode(rec), 1.0)], max_length=5)
    (a,) = arrays
    assert a.model_input == [1, 2, 3, 10] and a.target_tokens == [2, 3, 10, 11]
    assert a.logprobs == [0.0, 0.0, -0.1, -0.2]
    assert stats.truncated_records == 1 and stats.truncated_tokens == 1
    arrays, stats = episode_datums([(_episode(rec), 1.0)], max_length=3)
    assert arrays == [] and stats.dropped_records == 1
    # a cut that leaves no sampled token trains nothing
    rec2 = _record([1, 2], [20, 21, 12], [0, 0, 1], [0.0, 0.0, -0.3])
    arrays, stats = episode_datums([(_episode(rec2), 1.0)], max_length=4)
    assert arrays == [] and stats.empty_records == 1


def test_real_tinker_datum():
    rec = _record([1, 2], [10, 11, 20, 12], [1, 1, 0, 1], [-0.1, -0.2, 0.0, -0.3])
    datum = to_tinker(record_arrays(rec, 2.0, episode_id="e0"))
    assert datum.model_input.to_ints() == [1, 2, 10, 11, 20]
    inputs = datum.loss_fn_inputs
    assert inputs["target_tokens"].dtype == "int64"
    assert inputs["target_tokens"].tolist() == [2, 10, 11, 20, 12]
    assert inputs["logprobs"].dtype == "float32"
    assert inputs["logprobs"].tolist() == pytest.approx([0.0, -0.1, -0.2, 0.0, -0.3])
    assert inputs["advantages"].tolist() == [0.0, 2.0, 2.0, 0.0, 2.0]
