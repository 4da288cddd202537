"""The draws of a whole decoding step at once, identical to :func:`.token_sampling.sample_token`
row by row.

``torch.multinomial(probs, 1, generator=g)`` draws ``argmax(probs / q)`` with ``q`` one
Exp(1) sample per vocabulary id from ``g``; on a CPU those exponentials are computed one
at a time, ~2.5 ms for SmolLM2's 49,152 ids, so 32 rows cost more than the layers'
arithmetic of a step. Here each row's generator fills only uniforms (vectorised, 0.25 ms),
and ``q = -log1p(-u)`` is computed for all rows together: the same numbers, bit for bit,
and the generator left in the same state (each row's draw still depends only on its own
seed, never on the rows beside it). :func:`exact` checks that equivalence once on the
running torch; where it does not hold, every draw goes through ``torch.multinomial``.

A row that cannot be drawn (NaN logits, or settings that leave no probability to draw
from) gets an error in its place; the rows beside it are drawn as if it were not there.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from .token_sampling import LogprobsMode, sample_token, truncate

if TYPE_CHECKING:
    import torch

__all__ = ["Draw", "exact", "sample_rows", "undrawable"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Draw:
    """One row's sampling settings and generator."""

    temperature: float
    top_k: int
    top_p: float
    generator: Any


@lru_cache(maxsize=1)
def exact() -> bool:
    """Whether the vectorised draw equals ``torch.multinomial`` on this torch (checked on
    a few seeds and distributions, generator states included)."""
    import torch

    for seed in (0, 1, 12345):
        probs = torch.softmax(
            torch.randn(4099, generator=torch.Generator().manual_seed(seed)) * 4, -1
        )
        a, b = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        want = [int(torch.multinomial(probs, 1, generator=a)) for _ in range(3)]
        got = []
        for _ in range(3):
            u = torch.empty(probs.shape[0], dtype=torch.float64).uniform_(generator=b)
            got.append(int(torch.argmax(probs / (-torch.log1p(-u)).float())))
        if want != got or not torch.equal(a.get_state(), b.get_state()):
            log.warning(
                "vectorised sampling differs from torch.multinomial on torch %s: "
                "drawing row by row",
                torch.__version__,
            )
            return False
    return True


def _winners(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """``argmax(probs / q)`` per row, ``q = float(-log1p(-u))``, computing ``q`` only
    where it can win: ``q >= u``, so an id whose ``probs / q`` reaches a value already
    seen has ``u <= probs / value``. The value seen is the most likely id's; it is a
    candidate itself, so every row has one."""
    import torch

    top_p, top = probs.max(dim=-1, keepdim=True)  # max(dim) is ~3x faster than argmax
    best = (top_p / (-torch.log1p(-uniforms.gather(1, top))).float())[:, 0]
    # in float32, with a relative margin far above its rounding: every possible winner
    scale = (1 + 1e-4) / best[:, None]
    rows, cols = torch.nonzero(uniforms.float() <= probs * scale, as_tuple=True)
    values = probs[rows, cols] / (-torch.log1p(-uniforms[rows, cols])).float()
    # the largest value per row, and of the ids reaching it the first, as argmax picks
    peak = torch.full((probs.shape[0],), -math.inf).scatter_reduce(0, rows, values, "amax")
    reach = values == peak[rows]
    first = torch.full((probs.shape[0],), probs.shape[1], dtype=cols.dtype)
    first = first.scatter_reduce(0, rows[reach], cols[reach], "amin")
    if bool((first == probs.shape[1]).any()):  # only a row with NaN has no candidate
        raise ValueError("probability tensor contains NaN: the logits are not finite")
    return first


def undrawable(draw: Draw, cause: object = "") -> ValueError:
    """The error of a row no token can be drawn for."""
    return ValueError(
        f"probability tensor contains NaN: no token can be drawn with temperature="
        f"{draw.temperature}, top_k={draw.top_k}, top_p={draw.top_p} (non-finite logits or "
        f"settings){f': {cause}' if cause else ''}"
    )


def sample_rows(
    logits: torch.Tensor, draws: Sequence[Draw], mode: LogprobsMode = "sampling"
) -> list[tuple[int, float] | ValueError]:
    """``(id, logprob)`` per row of float32 ``logits`` ``[rows, vocab]``, each row exactly
    what :func:`sample_token` draws for it, or the :func:`undrawable` error of a row that
    cannot be drawn (the other rows are drawn all the same)."""
    import torch

    results: list[tuple[int, float] | ValueError | None] = [None] * len(draws)
    by_temperature: dict[float, list[int]] = {}
    for i, d in enumerate(draws):
        if d.temperature <= 0.0 or d.generator is None or not exact():
            try:
                results[i] = sample_token(
                    logits[i],
                    temperature=d.temperature,
                    top_k=d.top_k,
                    top_p=d.top_p,
                    generator=d.generator,
                    mode=mode,
                )
            except (ValueError, RuntimeError) as exc:  # multinomial refuses NaN: RuntimeError
                results[i] = undrawable(d, exc)
        else:
            by_temperature.setdefault(d.temperature, []).append(i)
    for temperature, rows in by_temperature.items():
        # every row in order (a decoding step at one temperature) needs no gathered copy
        picked = logits if rows == list(range(logits.shape[0])) else logits[torch.tensor(rows)]
        # a python-float divisor, as sample_token uses: the same kernel, the same bits
        scaled = picked / temperature
        processed = scaled
        if any(draws[i].top_k > 0 or draws[i].top_p < 1.0 for i in rows):
            processed = torch.stack(
                [truncate(scaled[j], draws[i].top_k, draws[i].top_p) for j, i in enumerate(rows)]
            )
        probs = torch.softmax(processed, dim=-1)
        # softmax makes a whole row NaN when any logit is NaN or +inf, or when all are
        # -inf: one column tells which rows cannot be drawn
        bad = torch.isnan(probs[:, 0])
        if bool(bad.any()):
            for j in bad.nonzero().flatten().tolist():
                results[rows[j]] = undrawable(draws[rows[j]])
            keep = (~bad).nonzero().flatten()
            rows = [rows[j] for j in keep.tolist()]
            if not rows:
                continue
            picked, scaled, processed, probs = (t[keep] for t in (picked, scaled, processed, probs))
        # the uniforms exponential_ would consume, one row per generator
        uniforms = torch.empty(probs.shape, dtype=torch.float64)
        for j, i in enumerate(rows):
            uniforms[j].uniform_(generator=draws[i].generator)
        tokens = _winners(probs, uniforms)
        if mode == "processed":
            source = processed
        elif mode == "raw":
            source = picked
        else:
            source = scaled
        logprobs = torch.log_softmax(source, dim=-1).gather(1, tokens[:, None])[:, 0]
        for j, i in enumerate(rows):
            results[i] = (int(tokens[j]), float(logprobs[j]))
    return [r for r in results if r is not None]
