"""Per-row sampling math of the embedded engine: logits processing, the draw, the logprob.

Which distribution a reported logprob refers to (``logprobs_mode``):

``"sampling"`` (default)
    ``log_softmax(logits / T)`` at the sampled id, untruncated: the temperature-scaled
    distribution. A trainer recomputes exactly this from its own logits (``logits / T``),
    so on-policy importance ratios start at 1. With ``top_p=1`` and ``top_k=-1`` (the usual
    RL setting) it is also the distribution the token was drawn from.
``"processed"``
    The log-probability under the distribution the token was actually drawn from: after
    temperature, top-k and top-p truncation, renormalised (vLLM's ``processed_logprobs``).
``"raw"``
    ``log_softmax(logits)`` of the model, ignoring temperature (vLLM's default ``raw_logprobs``).

Greedy decoding (``temperature == 0``) picks the argmax; ``"sampling"`` and ``"raw"`` then
both report ``log_softmax(logits)`` and ``"processed"`` reports 0.0 (probability one).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import torch

LogprobsMode = Literal["sampling", "processed", "raw"]

__all__ = ["LogprobsMode", "sample_token", "truncate"]


def truncate(scaled: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """``scaled`` with every id outside the top-k / top-p nucleus set to ``-inf``."""
    import torch

    out = scaled
    vocab = scaled.shape[-1]
    if 0 < top_k < vocab:
        kth = torch.topk(out, top_k).values[-1]
        out = out.masked_fill(out < kth, -math.inf)
    if top_p < 1.0:
        sorted_logits, order = torch.sort(out, descending=True)
        cum = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
        # drop ids whose preceding mass already reaches top_p; the first id always stays,
        # even for top_p <= 0 (an empty nucleus would leave nothing to draw)
        drop_sorted = (cum - torch.softmax(sorted_logits, dim=-1)) >= top_p
        drop_sorted[0] = False
        drop = torch.zeros_like(drop_sorted).scatter(0, order, drop_sorted)
        out = out.masked_fill(drop, -math.inf)
    return out


def sample_token(
    logits: torch.Tensor,
    *,
    temperature: float,
    top_k: int,
    top_p: float,
    generator: torch.Generator | None,
    mode: LogprobsMode = "sampling",
) -> tuple[int, float]:
    """Draw one id from a row of float32 ``logits`` (shape ``[vocab]``); return ``(id, logprob)``."""
    import torch

    if temperature <= 0.0:
        if bool(torch.isnan(logits).any()):  # argmax would pick the NaN's id
            raise ValueError("logits contain NaN: no token can be picked")
        token = int(torch.argmax(logits))
        if mode == "processed":
            return token, 0.0
        return token, float(torch.log_softmax(logits, dim=-1)[token])
    scaled = logits / temperature
    processed = truncate(scaled, top_k, top_p)
    probs = torch.softmax(processed, dim=-1)
    token = int(torch.multinomial(probs, 1, generator=generator))
    if mode == "processed":
        return token, float(torch.log_softmax(processed, dim=-1)[token])
    if mode == "raw":
        return token, float(torch.log_softmax(logits, dim=-1)[token])
    return token, float(torch.log_softmax(scaled, dim=-1)[token])
