"""The table a training run ends with: what changed between its first and last steps, and
on held-out prompts between the base policy and the trained one."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rollhub.evaluation import EvalReport

__all__ = ["STEP_METRICS", "before_after_rows", "window_mean"]

#: per-step metrics compared (key in metrics.jsonl, label)
STEP_METRICS = (
    ("reward_mean", "reward"),
    ("success_rate", "task success"),
    ("tool_call_rate", "tool-call rate"),
    ("turns_mean", "turns per episode"),
)
_EVAL_METRICS = (
    ("pass_at_1", "pass@1"),
    ("pass_at_k", "pass@k"),
    ("reward_mean", "reward"),
    ("tool_call_rate", "tool-call rate"),
    ("turns_mean", "turns per episode"),
)


def window_mean(history: Sequence[Mapping[str, Any]], key: str) -> float | None:
    """Mean of ``key`` over the given steps' rows (rows without a number are skipped)."""
    values = [float(r[key]) for r in history if isinstance(r.get(key), int | float)]
    return sum(values) / len(values) if values else None


def before_after_rows(
    history: Sequence[Mapping[str, Any]], before: EvalReport | None, after: EvalReport | None,
    *, window: int = 3,
) -> list[tuple[str, str, str, str]]:
    """``(section, metric, before, after)`` rows: the first ``window`` steps against the
    last ``window``, then the held-out evaluation of the base and the final policy."""
    rows: list[tuple[str, str, str, str]] = []
    if history:
        w = min(window, len(history))
        first, last = history[:w], history[-w:]
        section = f"training: steps 1-{w} vs {len(history) - w + 1}-{len(history)}"
        for key, label in STEP_METRICS:
            rows.append((section, label, _fmt(window_mean(first, key)),
                         _fmt(window_mean(last, key))))
    if before is not None or after is not None:
        k = (after or before).k  # type: ignore[union-attr]
        section = f"held-out eval ({(after or before).prompts} prompts × {k})"  # type: ignore[union-attr]
        for key, label in _EVAL_METRICS:
            rows.append((section, label, _fmt(getattr(before, key, None)),
                         _fmt(getattr(after, key, None))))
    return rows


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
