"""95% intervals for the figures a run reports about a policy.

- :func:`wilson`: a proportion of independent trials. Unlike the normal approximation it
  stays inside [0, 1] and is honest at 0 and 1 successes; pass@1 uses it as the floor of
  its prompt-resampled interval (:func:`rollhub.runs.evaluation.pass_at_1_interval`).
- :func:`bootstrap_mean`: a mean over prompts' samples, resampling *prompts* (the samples
  of one prompt are not independent of each other).
- :func:`bootstrap_difference`: the difference of a figure between two runs scored on the
  same prompts, resampling the shared prompts together (paired), as ``rollhub compare``
  reports each run against its control.

Pure Python and seeded: the same inputs give the same interval.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence

__all__ = ["Z95", "bootstrap_difference", "bootstrap_mean", "wilson"]

#: the normal quantile of a two-sided 95% interval
Z95 = 1.959963984540054
#: bootstrap resamples; the interval's ends move by well under 0.01 between seeds at this size
RESAMPLES = 2000


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of ``successes`` in ``n`` trials; ``(0, 1)`` when n = 0."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def _percentiles(values: list[float], level: float = 0.95) -> tuple[float, float]:
    values.sort()
    lo = values[int((1 - level) / 2 * (len(values) - 1))]
    hi = values[int((1 + level) / 2 * (len(values) - 1))]
    return lo, hi


def _mean_of(groups: Sequence[Sequence[float]]) -> float:
    flat = [x for g in groups for x in g]
    return sum(flat) / len(flat) if flat else math.nan


def bootstrap_mean(
    groups: Sequence[Sequence[float]], *, resamples: int = RESAMPLES, seed: int = 0
) -> tuple[float, float]:
    """A percentile bootstrap interval of the mean of every value, resampling groups (one
    group per prompt). ``(nan, nan)`` without values; a single group gives its mean twice.
    The groups' order does not matter (an evaluation's prompts come back in the order
    they finished): they are resampled in a canonical order."""
    groups = sorted(list(g) for g in groups if g)
    if not groups:
        return math.nan, math.nan
    if len(groups) == 1:
        m = _mean_of(groups)
        return m, m
    rng = random.Random(seed)
    stats = [_mean_of(rng.choices(groups, k=len(groups))) for _ in range(resamples)]
    return _percentiles(stats)


def bootstrap_difference(
    run: Mapping[str, Sequence[float]],
    control: Mapping[str, Sequence[float]],
    *,
    statistic: Callable[[Sequence[Sequence[float]]], float] = _mean_of,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> tuple[float, float, float, int]:
    """``(difference, low, high, prompts)`` of ``statistic(run) − statistic(control)`` over
    the prompts both scored, resampling those prompts together.

    :param run: prompt id → that prompt's values (e.g. 1.0/0.0 per sample for pass@1).
    """
    shared = sorted(k for k in run if k in control and run[k] and control[k])
    if not shared:
        return math.nan, math.nan, math.nan, 0
    diff = statistic([run[k] for k in shared]) - statistic([control[k] for k in shared])
    rng = random.Random(seed)
    stats = []
    for _ in range(resamples):
        pick = rng.choices(shared, k=len(shared))
        stats.append(statistic([run[k] for k in pick]) - statistic([control[k] for k in pick]))
    lo, hi = _percentiles(stats)
    return diff, lo, hi, len(shared)
