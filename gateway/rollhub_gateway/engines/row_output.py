"""A batch row's output: each drawn token kept and sent to the row's caller, the checks
that end the row (a stop id, a stop string, ``max_tokens``), and the generation or the
error it ends with.

The engine's worker thread calls these for every token it draws; they touch only the row,
so the batch's slots and states stay the engine's business (:mod:`.batching`).
"""

from __future__ import annotations

import time

from rollhub.errors import GatewayError
from rollhub.sampling import Generation, TokenChunk

from .step_plan import Row

__all__ = ["engine_error", "final_generation", "take_token"]


def take_token(row: Row, token: int, logprob: float) -> str | None:
    """Append a drawn token to ``row`` and emit it.

    :returns: the finish reason when the token ends the row (``"stop"``, ``"length"``),
        else None.
    """
    p = row.params
    row.token_ids.append(token)
    row.logprobs.append(logprob)
    if row.first_token_at is None:
        row.first_token_at = time.perf_counter()
    row.emit(TokenChunk([token], [logprob]))
    if token in row.stop_ids:
        return "stop"
    if p.stop and row.decode is not None:
        text = row.decode(row.token_ids)
        # "" is in every text: never a stop (the gateway refuses it; its cut skips it too)
        if any(s and s in text for s in p.stop):
            return "stop"
    if len(row.token_ids) >= row.max_tokens:
        return "length"
    return None


def final_generation(row: Row, reason: str, weight_version: int | None) -> Generation:
    """What ``row`` ends with: its tokens, ``reason``, the version of the weights that
    sampled it, and its timings (``ttft_s`` and ``total_s`` from its submission)."""
    now = time.perf_counter()
    metrics = {
        "prompt_tokens": len(row.prompt_ids),
        "completion_tokens": len(row.token_ids),
        "ttft_s": (row.first_token_at or now) - row.submitted_at,
        "total_s": now - row.submitted_at,
        "max_batch": row.max_batch,
    }
    return Generation(list(row.token_ids), list(row.logprobs), reason, weight_version, metrics)


def engine_error(what: str, exc: BaseException) -> GatewayError:
    """The error a row's caller gets when ``what`` failed with ``exc``."""
    err = GatewayError(f"transformers engine {what} failed: {exc}", engine="transformers")
    err.__cause__ = exc
    return err
