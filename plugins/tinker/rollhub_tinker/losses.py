"""The value of a step's RL loss as Tinker defines it, for the step's ``loss`` metric.

Servers differ in what they report: the hosted service sums the loss as ``loss:sum`` in
``metrics``, a SkyRL server returns each position's loss (``elementwise_loss``) beside the
learner's logprobs, and a server may report neither. The metric is taken in that order;
failing both it is recomputed from the learner's logprobs with the loss's own definition
(Tinker's loss pages), per sampled position, with ``r = exp(learner − sampler)`` and the
thresholds of ``loss_fn_config`` (0.8 and 1.2 unless set):

- ``importance_sampling``: ``−r·A``;
- ``ppo``: ``−min(r·A, clip(r, low, high)·A)``;
- ``cispo``: ``−clip(r, low, high)·learner·A`` (the clipped ratio is a constant there).

The sampler/learner mismatch (``sampler_learner_kl``, the mean of ``sampler − learner``
over sampled positions) comes from the same logprobs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from rollhub_tinker.datums import DatumArrays

__all__ = ["DEFAULT_CLIP", "loss_metrics", "token_loss"]

#: Tinker's ratio bounds when ``loss_fn_config`` sets none (ε = 0.2 on either side)
DEFAULT_CLIP = (0.8, 1.2)


def token_loss(
    loss_fn: str, learner: float, sampler: float, advantage: float,
    clip: tuple[float, float] = DEFAULT_CLIP,
) -> float:
    """One sampled position's loss under ``loss_fn``."""
    ratio = math.exp(learner - sampler)
    if loss_fn == "importance_sampling":
        return -ratio * advantage
    clipped = min(max(ratio, clip[0]), clip[1])
    if loss_fn == "ppo":
        return -min(ratio * advantage, clipped * advantage)
    if loss_fn == "cispo":
        return -clipped * learner * advantage
    raise ValueError(f"no loss value for loss_fn {loss_fn!r}")


def loss_metrics(
    arrays: Sequence[DatumArrays], out: Any, loss_fn: str = "importance_sampling",
    loss_fn_config: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """``loss`` and ``sampler_learner_kl`` of a ``forward_backward`` result (``out``, a
    ``tinker.ForwardBackwardOutput``) of the datums ``arrays``."""
    config = loss_fn_config or {}
    clip = (float(config.get("clip_low_threshold", DEFAULT_CLIP[0])),
            float(config.get("clip_high_threshold", DEFAULT_CLIP[1])))  # fmt: skip
    recomputed, kl, n = 0.0, 0.0, 0
    elementwise: float | None = 0.0
    for arrays_i, outputs in zip(arrays, out.loss_fn_outputs, strict=True):
        learner = outputs["logprobs"].tolist()
        losses = outputs.get("elementwise_loss")
        if losses is None:
            elementwise = None
        elif elementwise is not None:
            elementwise += math.fsum(losses.tolist())
        for j, (adv, sampler_lp) in enumerate(zip(arrays_i.advantages, arrays_i.logprobs,
                                                  strict=True)):
            if adv == 0.0 and sampler_lp == 0.0:
                continue
            recomputed += token_loss(loss_fn, learner[j], sampler_lp, adv, clip)
            kl += sampler_lp - learner[j]
            n += 1
    reported = getattr(out, "metrics", None) or {}
    loss = reported.get("loss:sum")
    if loss is None:
        loss = elementwise if elementwise is not None else recomputed
    metrics = {"loss": float(loss)}
    if n:
        metrics["sampler_learner_kl"] = kl / n
    return metrics
