"""One record per rollout: an episode, a batch item and upstream's batch item read the one
:class:`RolloutOutcome` a rollout ended in, with no copies of its fields that could drift."""

from __future__ import annotations

import dataclasses
import time

from rollhub.batch import BatchItem
from rollhub.compat.upstream_futures import BatchItem as UpstreamItem
from rollhub.episode import Episode, ErrorInfo
from rollhub.submission.future import RolloutOutcome


def outcome(status="ok", **kw) -> RolloutOutcome:
    return RolloutOutcome(**{
        "session_id": "q-0-r1", "exp_id": "exp", "input_id": "q", "result_key": "exp/q/q-0-r1.json",
        "status": status, "result": {"answer": 2}, "submitted_at": 100.0, "finished_at": 103.5,
        **kw})  # fmt: skip


def test_an_episode_reads_its_outcome_once_it_has_one():
    episode = Episode("q-0", "q", "q-0", 0, "submit_error", submitted_at=99.0)
    assert episode.outcome is None and episode.status == "submit_error"
    ended = outcome()
    episode.take_outcome(ended)
    assert episode.outcome is ended
    assert (episode.session_id, episode.status, episode.result, episode.error) == (
        "q-0-r1", "ok", {"answer": 2}, None)  # fmt: skip
    assert episode.finished_at == 103.5 and episode.elapsed == 4.5
    assert episode.result is ended.result  # the outcome's own dict, not a copy


def test_what_the_pipeline_sets_is_the_episodes_own_and_the_outcome_stays():
    episode = Episode("q-0", "q", "q-0", 0, "submit_error")
    ended = outcome()
    episode.take_outcome(ended)
    episode.status, episode.error = "agent_error", ErrorInfo("RewardError", "verifier crashed")
    assert episode.status == "agent_error" and episode.error.type == "RewardError"
    assert ended.status == "ok" and ended.error is None and episode.outcome is ended
    assert episode.result == {"answer": 2}  # not set by the pipeline: still the outcome's
    # the next attempt's outcome replaces the last one's, and the pipeline's verdict with it
    retried = outcome(status="timeout", session_id="q-0-r2", result=None)
    episode.take_outcome(retried)
    assert (episode.outcome, episode.status, episode.session_id) == (retried, "timeout", "q-0-r2")
    assert episode.error is None


def test_an_outcome_without_an_end_time_ends_when_it_arrives():
    episode = Episode("q-0", "q", "q-0", 0, "submit_error")
    before = time.time()
    episode.take_outcome(outcome(finished_at=None))
    assert episode.finished_at is not None and episode.finished_at >= before


def test_an_episode_without_an_outcome_keeps_the_old_shape():
    a = Episode("e", "g", "s", 0, "ok", reward=1.0)
    b = Episode("e", "g", "s", 0, "ok", reward=1.0)
    assert a == b and a.outcome is None and a.result is None and a.traces == []
    b.status = "agent_error"
    assert a != b and "status='ok'" in repr(a)


def test_an_episode_with_an_outcome_equals_one_given_the_same_values():
    with_outcome = Episode("e", "q", "x", 0, "submit_error", submitted_at=100.0)
    with_outcome.take_outcome(outcome(result=None))
    # what an export row gives back: the same values, no outcome object
    by_hand = Episode("e", "q", "q-0-r1", 0, "ok", submitted_at=100.0, finished_at=103.5)
    assert with_outcome == by_hand and by_hand.outcome is None
    by_hand.status = "timeout"
    assert with_outcome != by_hand


def test_a_batch_item_is_an_index_and_the_record():
    ended = outcome(status="agent_error", error=ErrorInfo("ValueError", "bad"), attempts=2)
    item = BatchItem(3, ended)
    assert [f.name for f in dataclasses.fields(BatchItem)] == ["index", "outcome"]
    assert item.outcome is ended and item.index == 3
    assert (item.input_id, item.session_id, item.status, item.result, item.error) == (
        "q", "q-0-r1", "agent_error", {"answer": 2}, ended.error)  # fmt: skip
    assert item.elapsed == 3.5 and not item.resumed and not item.ok


def test_a_resumed_item_reads_its_seconds_from_the_stored_document():
    stored = outcome(resumed=True, submitted_at=None, finished_at=None,
                     document={"answer": 2, "_rollhub": {"status": "ok", "elapsed_s": 3.3}})
    item = BatchItem(0, stored)
    assert item.resumed and item.ok and item.elapsed == 3.3


def test_an_item_refused_before_a_session_has_no_session_id():
    refused = outcome(status="submit_error", session_id="", result_key="", result=None)
    assert BatchItem(0, refused).session_id is None


def test_upstreams_item_is_a_view_of_the_record():
    document = {"rewards": 1.0, "status_code": 200}
    read = UpstreamItem.adapt(BatchItem(2, outcome(result={"rewards": 1.0}, document=document)))
    assert read == UpstreamItem(True, document, None, 2, 3.5)
    assert read.result is document
    timed_out = outcome(status="timeout", result=None, error=ErrorInfo("TimeoutError", "Timeout after 5s"))
    assert UpstreamItem.adapt(BatchItem(0, timed_out)) == UpstreamItem(
        False, None, "Timeout after 5s", 0, 3.5)  # fmt: skip
    try:
        raise RuntimeError("refused")
    except RuntimeError as exc:
        error = ErrorInfo.from_exception(exc)
    failed = UpstreamItem.adapt(BatchItem(1, outcome(status="submit_error", result=None, error=error)))
    assert not failed.success and failed.error == error.traceback
    assert "RuntimeError: refused" in failed.error
