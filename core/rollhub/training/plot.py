"""``training.png`` and run comparisons: per-step curves read back from ``metrics.jsonl``."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

from rollhub.runs.run_dir import RunDir

if TYPE_CHECKING:
    from collections.abc import Iterable

    from matplotlib.axes import Axes

__all__ = ["plot_comparison", "plot_runs", "plot_training", "read_metrics"]

log = logging.getLogger(__name__)


class PlottedRun(Protocol):
    """What :func:`plot_comparison` draws of a run (a ``rollhub.runs.comparison.RunSummary``)."""

    @property
    def label(self) -> str: ...

    @property
    def path(self) -> Path: ...

    @property
    def before(self) -> dict[str, Any] | None: ...

    @property
    def after(self) -> dict[str, Any] | None: ...


def read_metrics(path: Path) -> list[dict]:
    """The rows of a ``metrics.jsonl`` (a torn last line from a killed run is skipped)."""
    rows: list[dict[str, Any]] = []
    if not path.exists():
        return rows
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            log.warning("skipping a torn line in %s", path)
    return rows


def _pyplot() -> ModuleType | None:
    """matplotlib.pyplot on the Agg backend, or None when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ModuleNotFoundError:
        log.warning("no plot: matplotlib is not installed (pip install 'rollhub[plot]')")
        return None
    return plt


def _series(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
    pts = [(r["step"] + 1, float(r[key])) for r in rows if isinstance(r.get(key), int | float)]
    return ([s for s, _ in pts], [v for _, v in pts]) if pts else ([], [])


def _integer_steps(axes: Iterable[Axes]) -> None:
    """Steps are whole numbers: a short run must not label its axis 1, 1, 1, 2, 2, 2."""
    from matplotlib.ticker import MaxNLocator

    for ax in axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def plot_training(metrics_path: Path, out: Path) -> Path | None:
    """Draw, per step: reward (mean ± std), task success, tool-call rate, turns per
    episode, tokens trained and masked, and the loss. None when matplotlib is missing."""
    plt = _pyplot()
    if plt is None:
        return None
    rows = read_metrics(metrics_path)
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.4))
    ax = axes[0][0]
    xs, ms = _series(rows, "reward_mean")
    if xs:
        sd = [float(r.get("reward_std") or 0.0) for r in rows if r.get("reward_mean") is not None]
        ax.plot(xs, ms, marker="o", ms=3, label="mean reward")
        ax.fill_between(xs, [m - d for m, d in zip(ms, sd, strict=True)],
                        [m + d for m, d in zip(ms, sd, strict=True)], alpha=0.2, label="± std")
        ax.legend(loc="best", fontsize=8)
    ax.set(title="reward", xlabel="step")
    for ax, key, title in ((axes[0][1], "success_rate", "task success"),
                           (axes[0][2], "tool_call_rate", "tool-call rate"),
                           (axes[1][0], "turns_mean", "turns per episode")):
        ax.plot(*_series(rows, key), marker="o", ms=3)
        ax.set(title=title, xlabel="step")
    ax = axes[1][1]
    for key, label in (("trained_tokens", "trained (sampled)"), ("masked_tokens", "masked (tools)")):
        ax.plot(*_series(rows, key), marker="o", ms=3, label=label)
    ax.legend(loc="best", fontsize=8)
    ax.set(title="tokens per step", xlabel="step")
    ax = axes[1][2]
    ax.plot(*_series(rows, "loss"), marker="o", ms=3, color="tab:red")
    ax.set(title="loss", xlabel="step")
    for ax in axes.flat:
        ax.grid(alpha=0.3)
    _integer_steps(axes.flat)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_runs(runs: dict[str, Path], out: Path,
              keys: tuple[str, ...] = ("success_rate", "tool_call_rate", "reward_mean")) -> Path | None:
    """Several runs on the same per-step curves (e.g. trained seeds against an lr = 0
    control); ``runs`` maps a label to a run directory or its ``metrics.jsonl``."""
    plt = _pyplot()
    if plt is None:
        return None
    fig, axes = plt.subplots(1, len(keys), figsize=(4.4 * len(keys), 3.6), squeeze=False)
    for label, path in runs.items():
        rows = read_metrics(RunDir(path).metrics if path.is_dir() else path)
        style = "--" if "control" in label else "-"
        for ax, key in zip(axes[0], keys, strict=True):
            ax.plot(*_series(rows, key), style, marker="o", ms=3, label=label)
    for ax, key in zip(axes[0], keys, strict=True):
        ax.set(title=key.replace("_", " "), xlabel="step")
        ax.grid(alpha=0.3)
    _integer_steps(axes[0])
    axes[0][0].legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_comparison(
    runs: Sequence[PlottedRun], out: Path, *, control: PlottedRun | None = None
) -> Path | None:
    """``rollhub compare``'s figure: every run's task success, reward and tool-call rate per
    step (the control dashed), and held-out pass@1 before (the first run's base-weights
    report) and after training with its 95% interval, overall and per split. ``runs`` are :class:`rollhub.runs.comparison.RunSummary`."""
    plt = _pyplot()
    if plt is None:
        return None
    keys = (("success_rate", "task success"), ("reward_mean", "reward"),
            ("tool_call_rate", "tool-call rate"))
    fig, axes = plt.subplots(1, 4, figsize=(18, 3.8))
    for run in runs:
        rows = read_metrics(run.path / "metrics.jsonl")
        style = "--" if run is control else "-"
        for ax, (key, _) in zip(axes, keys, strict=False):
            ax.plot(*_series(rows, getattr(run, "prefix", "") + key), style, marker="o", ms=3,
                    label=run.label)
    for ax, (_, title) in zip(axes, keys, strict=False):
        ax.set(title=title, xlabel="step")
        ax.grid(alpha=0.3)
    _integer_steps(axes[:3])
    axes[0].legend(loc="best", fontsize=8)
    ax = axes[3]
    splits = sorted({s for r in runs for s in ((r.after or {}).get("splits") or {})})
    names = ["all", *splits]
    # the base weights' score, once: runs of one held-out set and eval seed share it
    base = next((r.before for r in runs if r.before), None)
    series: list[tuple[str, dict[str, Any], str, str | None]] = (
        [("before training", base, "s", "0.55")] if base else []
    )
    series += [(run.label, run.after or {}, "s" if run is control else "o", None)
               for run in runs]
    width = 0.8 / max(len(series), 1)
    for i, (label, report, marker, color) in enumerate(series):
        figures = [report, *[(report.get("splits") or {}).get(s) or {} for s in splits]]
        xs, ys, lo, hi = [], [], [], []
        for j, f in enumerate(figures):
            if f.get("pass_at_1") is None:
                continue
            ci = f.get("pass_at_1_ci") or (f["pass_at_1"], f["pass_at_1"])
            xs.append(j + (i - (len(series) - 1) / 2) * width)
            ys.append(f["pass_at_1"])
            lo.append(f["pass_at_1"] - ci[0])
            hi.append(ci[1] - f["pass_at_1"])
        ax.errorbar(xs, ys, yerr=[lo, hi], fmt=marker, capsize=3, label=label, color=color)
    if base:
        ax.legend(loc="best", fontsize=8)
    ax.set_xticks(range(len(names)), names)
    ax.set(title="held-out pass@1 (95% CI)", ylim=(0, 1), xlim=(-0.5, len(names) - 0.5))
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
