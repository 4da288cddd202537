"""The sampler check of :func:`rollhub_trl.grpo_trainer.grpo_trainer_class`, fed as TRL's
loss feeds it: the batch's rows shuffled and split into micro-batches, padded to the
batch's longest completion.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from rollhub.episode import Episode
from rollhub.trace import TraceRecord, TurnSpan
from rollhub_trl.grpo_trainer import _SamplerCheck


def _episode(i: int, logprobs: list[float], mask: list[int], trainable: bool = True) -> Episode:
    rec = TraceRecord(
        session_id=f"s{i}", prompt_ids=[1, 2], response_ids=list(range(10, 10 + len(mask))),
        response_mask=mask, response_logprobs=logprobs,
        turns=[TurnSpan(turn_index=0, start=0, end=len(mask), weight_version=0)],
    )
    return Episode(f"e{i}", "g", f"s{i}", i, "ok", reward=1.0, traces=[rec], trainable=trainable)


EPISODES = [
    _episode(0, [-0.5, -1.0, -9.0, -0.25], [1, 1, 0, 1]),  # a tool reply (mask 0) inside
    _episode(1, [-2.0, -0.75], [1, 1]),
    _episode(2, [-3.0, -3.0, -3.0], [1, 1, 1], trainable=False),  # not trained: not counted
]


def _learner(offset: float) -> torch.Tensor:
    """Per-row learner logprobs padded to 4 positions: the sampler's, plus ``offset``."""
    rows = []
    for e in EPISODES:
        lps = e.traces[-1].response_logprobs
        rows.append([lp + offset for lp in lps] + [0.0] * (4 - len(lps)))
    return torch.tensor(rows)


@pytest.mark.parametrize("offset", [0.0, 0.5])
def test_the_check_waits_for_every_row_and_matches_rows_wherever_they_were_shuffled(
    offset: float,
) -> None:
    metrics: dict[str, Any] = {}
    check = _SamplerCheck(EPISODES, metrics)
    learner = _learner(-offset)
    check.add([2, 0], learner[[2, 0]])  # the first micro-batch, rows shuffled
    assert not check.complete and metrics == {}
    check.add([1], learner[[1]])
    assert check.complete
    # five trained tokens (the tool reply and the untrained episode left out)
    assert metrics["sampler_learner_kl"] == pytest.approx(offset)
    assert metrics["sampler_learner_abs_diff"] == pytest.approx(offset)


def test_a_row_seen_twice_counts_once() -> None:
    metrics: dict[str, Any] = {}
    check = _SamplerCheck(EPISODES, metrics)
    learner = _learner(0.0)
    learner[0, 0] -= 1.0  # one token of row 0 off by 1
    check.add([0, 1], learner[[0, 1]])
    check.add([0, 2], learner[[0, 2]])
    assert metrics["sampler_learner_kl"] == pytest.approx(1.0 / 5)
