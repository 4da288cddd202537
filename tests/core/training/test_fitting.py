"""One way to fit trace records into training sequences: the budget, the skips, the counts."""

from __future__ import annotations

from rollhub.episode import Episode
from rollhub.trace import TraceRecord, TurnSpan
from rollhub.training.fitting import FitStats, fit_record, fit_records


def _record(prompt, response, mask, branch=0) -> TraceRecord:
    return TraceRecord(
        session_id="s", branch_id=branch, prompt_ids=prompt, response_ids=response,
        response_mask=mask, response_logprobs=[-0.5 if m else 0.0 for m in mask],
        turns=[TurnSpan(turn_index=0, start=0, end=len(response))],
    )


def _episode(*records: TraceRecord, eid: str = "e0") -> Episode:
    return Episode(eid, "g", eid, 0, "ok", reward=1.0, traces=list(records))


def test_a_record_within_the_budget_is_kept_whole() -> None:
    rec = _record([1, 2], [10, 11, 20, 12], [1, 1, 0, 1], branch=3)
    stats = FitStats()
    fitted = fit_record(rec, -1.5, episode_id="e0", max_length=6, stats=stats)
    assert fitted is not None
    assert (fitted.prompt_ids, fitted.response_ids, fitted.response_mask) == (
        [1, 2], [10, 11, 20, 12], [1, 1, 0, 1])
    assert fitted.response_logprobs == [-0.5, -0.5, 0.0, -0.5]
    assert (fitted.advantage, fitted.episode_id, fitted.branch_id) == (-1.5, "e0", 3)
    assert (fitted.trained_tokens, fitted.masked_tokens) == (3, 1)
    assert (stats.records, stats.trained_tokens, stats.masked_tokens, stats.truncated_records) == (
        1, 3, 1, 0)


def test_the_budget_cuts_drops_and_empties_and_counts_each() -> None:
    long = _record([1, 2, 3], [10, 11, 12], [1, 1, 1])
    (cut,), stats = fit_records([(_episode(long), 1.0)], max_length=5)
    assert cut.full_ids == [1, 2, 3, 10, 11] and cut.response_mask == [1, 1]
    assert (stats.truncated_records, stats.truncated_tokens, stats.trained_tokens) == (1, 1, 2)

    fitted, stats = fit_records([(_episode(long), 1.0)], max_length=3)
    assert fitted == [] and stats.dropped_records == 1 and stats.records == 0

    tool_first = _record([1, 2], [20, 21, 12], [0, 0, 1])  # the cut leaves only a tool result
    fitted, stats = fit_records([(_episode(tool_first), 1.0)], max_length=4)
    assert fitted == [] and (stats.empty_records, stats.truncated_records) == (1, 1)

    nothing_sampled = _record([1], [20], [0])
    fitted, stats = fit_records([(_episode(nothing_sampled), 1.0)])
    assert fitted == [] and stats.empty_records == 1


def test_zero_advantage_episodes_are_skipped_unless_asked_and_forks_are_records() -> None:
    main = _record([1, 2], [10, 11], [1, 1])
    fork = _record([1, 2, 10, 7], [12, 13], [1, 1], branch=1)
    pairs = [(_episode(main, fork), 1.0), (_episode(main, eid="e1"), 0.0)]
    fitted, stats = fit_records(pairs)
    assert [(f.episode_id, f.branch_id) for f in fitted] == [("e0", 0), ("e0", 1)]
    assert stats.episode_ids == ["e0", "e0"] and stats.datums == 2
    fitted, stats = fit_records(pairs, skip_zero_advantage=False)
    assert [f.episode_id for f in fitted] == ["e0", "e0", "e1"] and fitted[2].advantage == 0.0
    assert stats.as_metrics() == {
        "datums": 3, "trained_tokens": 6, "truncated_records": 0, "truncated_tokens": 0,
        "dropped_records": 0,
    }


def test_fixed_widths_move_the_prompt_tail_to_the_response_and_keep_every_record() -> None:
    """verl's shape: the prompt's head stays (the system prompt), its tail opens the
    response masked, the response is cut at its width; empty records are kept in place."""
    stats = FitStats()
    rec = _record([1, 2, 3, 4, 5], [6, 7, 8], [1, 0, 1])
    fitted = fit_record(rec, 1.0, episode_id="e0", prompt_length=3, response_length=4,
                        stats=stats)
    assert fitted is not None and fitted.prompt_ids == [1, 2, 3]
    assert (fitted.response_ids, fitted.response_mask) == ([4, 5, 6, 7], [0, 0, 1, 0])
    assert fitted.response_logprobs == [0.0, 0.0, -0.5, 0.0]
    assert (fitted.prompt_overflow, fitted.truncated_tokens) == (2, 1)
    assert (stats.prompt_overflow, stats.truncated_tokens, stats.trained_tokens) == (2, 1, 1)

    empty = fit_record(_record([1], [20], [0]), 1.0, episode_id="e0", prompt_length=3,
                       response_length=4, keep_empty=True, stats=stats)
    assert empty is not None and empty.response_mask == [0] and stats.empty_records == 1
