"""The torch converter: fitted records (the core's budget) grouped by their prompt."""

from __future__ import annotations

from rollhub.episode import Episode
from rollhub.trace import TraceRecord, TurnSpan
from rollhub_torch.sequences import prompt_groups


def _record(prompt, response, mask) -> TraceRecord:
    return TraceRecord(
        session_id="s", prompt_ids=prompt, response_ids=response, response_mask=mask,
        response_logprobs=[-0.25 if m else 0.0 for m in mask],
        turns=[TurnSpan(turn_index=0, start=0, end=len(response))],
    )


def _episode(eid: str, *records: TraceRecord) -> Episode:
    return Episode(eid, "g", eid, 0, "ok", reward=1.0, traces=list(records))


def test_records_of_one_prompt_share_a_group_after_the_budget_cut() -> None:
    pairs = [
        (_episode("a", _record([1, 2], [10, 11, 12], [1, 1, 1])), 1.0),
        (_episode("b", _record([1, 2], [13, 20], [1, 0])), -1.0),
        (_episode("c", _record([3], [14], [1])), 0.5),
        (_episode("d", _record([1, 2], [15], [1])), 0.0),  # no gradient: skipped
        (_episode("e", _record([1, 2], [21, 16], [0, 1])), 2.0),  # its sample is cut off
    ]
    groups, stats = prompt_groups(pairs, max_length=3)
    assert [g.prompt_ids for g in groups] == [(1, 2), (3,)]
    first, second = groups
    assert [(r.episode_id, r.token_ids, r.mask, r.advantage) for r in first.responses] == [
        ("a", [10], [1], 1.0), ("b", [13], [1], -1.0)]
    assert first.responses[0].logprobs == [-0.25]
    assert [(r.episode_id, r.token_ids) for r in second.responses] == [("c", [14])]
    assert (stats.records, stats.trained_tokens, stats.truncated_records,
            stats.truncated_tokens, stats.empty_records) == (3, 3, 3, 4, 1)
