"""``training.png``: mean reward and loss per step, read back from ``metrics.jsonl``."""

from __future__ import annotations

import json
import logging
from pathlib import Path

__all__ = ["plot_training", "read_metrics"]

log = logging.getLogger(__name__)


def read_metrics(path: Path) -> list[dict]:
    """The rows of a ``metrics.jsonl`` (a torn last line from a killed run is skipped)."""
    rows = []
    if not path.exists():
        return rows
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            log.warning("skipping a torn line in %s", path)
    return rows


def plot_training(metrics_path: Path, out: Path) -> Path | None:
    """Draw reward (mean ± std band) and loss per step; None when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ModuleNotFoundError:
        log.warning("no training.png: matplotlib is not installed (pip install 'rollhub[plot]')")
        return None
    rows = read_metrics(metrics_path)
    steps = [r["step"] for r in rows]
    fig, (ax_r, ax_l) = plt.subplots(1, 2, figsize=(10, 3.6))
    reward = [r.get("reward_mean") for r in rows]
    pts = [(s, m, r.get("reward_std") or 0.0) for s, m, r in zip(steps, reward, rows, strict=True)
           if m is not None]
    if pts:
        xs, ms, sd = zip(*pts, strict=True)
        ax_r.plot(xs, ms, marker="o", ms=3, label="mean reward")
        ax_r.fill_between(xs, [m - d for m, d in zip(ms, sd, strict=True)],
                          [m + d for m, d in zip(ms, sd, strict=True)], alpha=0.2, label="± std")
        ax_r.legend(loc="best", fontsize=8)
    ax_r.set(title="reward per step", xlabel="step", ylabel="reward")
    loss = [(s, r["loss"]) for s, r in zip(steps, rows, strict=True) if r.get("loss") is not None]
    if loss:
        ax_l.plot(*zip(*loss, strict=True), marker="o", ms=3, color="tab:red")
    ax_l.set(title="loss per step", xlabel="step", ylabel="loss")
    for ax in (ax_r, ax_l):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
