"""The interval arithmetic behind every reported figure (``rollhub.runs.intervals``)."""

from __future__ import annotations

import math
import random

import pytest
from rollhub.runs.evaluation import pass_at_1_interval
from rollhub.runs.intervals import bootstrap_difference, bootstrap_mean, wilson


def test_wilson_matches_the_textbook_values() -> None:
    # Newcombe (1998), table I: 81 of 263 → 0.2553-0.3662; 0 of 10 → 0-0.2775
    assert wilson(81, 263) == pytest.approx((0.2553, 0.3662), abs=1e-4)
    assert wilson(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson(10, 10) == pytest.approx((0.7225, 1.0), abs=1e-4)
    assert wilson(0, 0) == (0.0, 1.0)


def test_wilson_covers_the_truth_about_95_percent_of_the_time() -> None:
    rng = random.Random(0)
    covered = 0
    for _ in range(2000):
        k = sum(rng.random() < 0.3 for _ in range(40))
        lo, hi = wilson(k, 40)
        covered += lo <= 0.3 <= hi
    assert 0.93 < covered / 2000 < 0.97


def test_bootstrap_resamples_prompts_not_samples() -> None:
    # prompts either always or never solved: the spread is the prompts', far wider than if
    # the 40 samples were independent coin flips of p = 0.5 drawn per prompt
    groups = [[1.0] * 10 if i % 2 else [0.0] * 10 for i in range(4)]
    lo, hi = bootstrap_mean(groups)
    assert lo <= 0.25 and hi >= 0.75
    assert bootstrap_mean(groups, seed=1) != (math.nan, math.nan)
    assert bootstrap_mean([[0.5, 0.5]]) == (0.5, 0.5)
    assert all(math.isnan(x) for x in bootstrap_mean([]))


def test_a_paired_difference_only_uses_shared_prompts() -> None:
    run = {f"p{i}": [1.0, 1.0, 0.0, 1.0] for i in range(30)}
    control = {f"p{i}": [0.0, 1.0, 0.0, 0.0] for i in range(30)}
    control["only-here"] = [1.0]
    diff, lo, hi, n = bootstrap_difference(run, control)
    assert n == 30 and diff == pytest.approx(0.5)
    assert lo == hi == pytest.approx(0.5)  # every prompt moved alike
    noisy = {k: [1.0] if i % 3 else [0.0] for i, k in enumerate(run)}
    diff, lo, hi, _ = bootstrap_difference(noisy, control)
    assert lo < diff < hi
    assert math.isnan(bootstrap_difference({"a": [1.0]}, {"b": [0.0]})[0])


def test_the_bootstrap_interval_does_not_depend_on_the_order_of_the_prompts():
    # an evaluation's prompts come back in the order their groups finished, which differs
    # between two runs that sampled the same tokens: the interval must not
    solved = [[1, 1], [0, 0], [1, 0], [0, 0], [1, 1], [1, 1], [0, 1], [0, 0]] * 2
    orders = [solved, solved[::-1], solved[1::2] + solved[::2]]
    assert len({bootstrap_mean(o) for o in orders}) == 1
    assert len({pass_at_1_interval(o) for o in orders}) == 1
