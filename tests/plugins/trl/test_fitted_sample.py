"""TRL's converter of the core's fitted records (:func:`rollhub_trl.rollout.trl_sample`).

Records are fitted by :func:`rollhub.training.fitting.fit_record`, as the rollout function
fits them, and under a length budget too, so a cut record converts with its arrays aligned.
"""

from __future__ import annotations

from rollhub.episode import Episode
from rollhub.trace import TraceRecord, TurnSpan
from rollhub.training.fitting import FitStats, fit_record
from rollhub_trl.rollout import episode_sample, trl_sample

EOS = 2


def _record(prompt: list[int], response: list[int], mask: list[int],
            logprobs: list[float]) -> TraceRecord:
    return TraceRecord(
        session_id="s", prompt_ids=prompt, response_ids=response, response_mask=mask,
        response_logprobs=logprobs,
        turns=[TurnSpan(turn_index=0, start=0, end=len(response), weight_version=0)],
    )


def test_a_fitted_record_keeps_its_ids_and_mask_and_only_sampled_logprobs() -> None:
    # a tool reply (90, 91) whose logprobs are not 0.0: they must not reach TRL
    rec = _record([5, 6, 7], [10, 11, 90, 91, 12, EOS], [1, 1, 0, 0, 1, 1],
                  [-0.1, -0.2, -9.0, -9.0, -0.3, -0.4])
    fitted = fit_record(rec, 0.5, episode_id="e", keep_empty=True)
    assert fitted is not None
    s = trl_sample(fitted, 1.0, records_dropped=2)
    assert s.prompt_ids == [5, 6, 7]
    assert s.completion_ids == [10, 11, 90, 91, 12, EOS]
    assert s.env_mask == [1, 1, 0, 0, 1, 1]
    assert s.logprobs == [-0.1, -0.2, 0.0, 0.0, -0.3, -0.4]
    assert s.reward == 1.0 and s.records_dropped == 2
    # the sample owns its lists: TRL may pad them in place
    s.completion_ids.append(0)
    assert fitted.response_ids == [10, 11, 90, 91, 12, EOS]


def test_a_record_cut_by_a_budget_converts_with_aligned_arrays() -> None:
    rec = _record([5, 6, 7], [10, 11, 90, 91, 12, EOS], [1, 1, 0, 0, 1, 1],
                  [-0.1, -0.2, 0.0, 0.0, -0.3, -0.4])
    stats = FitStats()
    fitted = fit_record(rec, 1.0, episode_id="e", max_length=7, stats=stats)
    assert fitted is not None and stats.truncated_tokens == 2
    s = trl_sample(fitted, 0.0)
    assert s.prompt_ids == [5, 6, 7] and s.completion_ids == [10, 11, 90, 91]
    assert s.env_mask == [1, 1, 0, 0] and s.logprobs == [-0.1, -0.2, 0.0, 0.0]
    assert len(s.prompt_ids) + len(s.completion_ids) == 7
    assert sum(s.env_mask) == fitted.trained_tokens == 2


def test_a_record_with_no_sampled_token_is_a_fully_masked_completion() -> None:
    rec = _record([5], [90, 91], [0, 0], [0.0, 0.0])
    e = Episode("e", "g", "s", 0, "ok", reward=0.25, traces=[rec])
    s = episode_sample(e, EOS, advantage=0.3)
    # kept in place (not the one-token filler): TRL sees the tokens, none is trained
    assert s.completion_ids == [90, 91] and s.env_mask == [0, 0] and s.logprobs == [0.0, 0.0]
    assert s.reward == 0.25
