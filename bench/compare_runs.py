"""Compare training runs: trained seeds against learning-rate-0 controls.

    .venv/bin/python bench/compare_runs.py seed1=RUN_DIR seed2=RUN_DIR \\
        control1=RUN_DIR control2=RUN_DIR --plot out.png

For each run: task success over its first and last 3 steps, the held-out evaluation before
and after (``eval.json``), the step at which success first averaged 0.6 over 3 steps, and
the wall time. Labels containing "control" are drawn dashed. Prints a Markdown table, then
the trained-minus-control gap against the spread between trained seeds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _summary(run: Path) -> dict[str, object]:
    from rollhub.training.before_after import window_mean
    from rollhub.training.plot import read_metrics

    rows = read_metrics(run / "metrics.jsonl")
    clock = 0.0
    for row in rows:  # runs recorded before steps carried elapsed_s: sum the step times
        clock += float(row.get("time_step_s") or 0.0)
        row.setdefault("elapsed_s", round(clock, 3))
    evals = json.loads((run / "eval.json").read_text()) if (run / "eval.json").exists() else {}
    reached = None
    for i in range(2, len(rows)):
        if (window_mean(rows[i - 2 : i + 1], "success_rate") or 0) >= 0.6:
            reached = (i + 1, rows[i]["elapsed_s"])
            break
    return {
        "first3": window_mean(rows[:3], "success_rate"),
        "last3": window_mean(rows[-3:], "success_rate"),
        "tool_first3": window_mean(rows[:3], "tool_call_rate"),
        "tool_last3": window_mean(rows[-3:], "tool_call_rate"),
        "eval_before": (evals.get("before") or {}).get("pass_at_1"),
        "eval_after": (evals.get("after") or {}).get("pass_at_1"),
        "reached": reached,
        "steps": len(rows),
        "train_s": rows[-1]["elapsed_s"] if rows else None,
        "sample_s": statistics.median(float(r.get("time_sample_s") or 0) for r in rows),
        "trainer_s": statistics.median(float(r.get("time_train_s") or 0) for r in rows),
    }


def _f(x: object) -> str:
    return "-" if x is None else f"{x:.3f}" if isinstance(x, float) else str(x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="LABEL=RUN_DIR")
    parser.add_argument("--plot", help="write the curves of every run here")
    args = parser.parse_args()
    runs = {label: Path(path) for label, path in (r.split("=", 1) for r in args.runs)}
    sums = {label: _summary(path) for label, path in runs.items()}
    print("| run | success, steps 1-3 | success, last 3 | tool calls, 1-3 → last 3 | "
          "held-out pass@1 before → after | success ≥ 0.6 (3-step mean) | training wall | step: sample + train (median) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for label, s in sums.items():
        reached = s["reached"]
        when = f"step {reached[0]} ({reached[1] / 60:.1f} min)" if reached else "never"
        print(f"| {label} | {_f(s['first3'])} | {_f(s['last3'])} | {_f(s['tool_first3'])} → "
              f"{_f(s['tool_last3'])} | {_f(s['eval_before'])} → {_f(s['eval_after'])} | "
              f"{when} | {float(s['train_s']) / 60:.1f} min | "
              f"{float(s['sample_s']):.0f} s + {float(s['trainer_s']):.0f} s |")
    trained = [float(s["last3"]) for k, s in sums.items() if "control" not in k]
    control = [float(s["last3"]) for k, s in sums.items() if "control" in k]
    if len(trained) > 1 and control:
        gap = statistics.mean(trained) - statistics.mean(control)
        spread = max(trained) - min(trained)
        print(f"\ntrained − control, success over the last 3 steps: {gap:.3f} "
              f"(trained seeds spread {spread:.3f}): {'holds' if gap > spread else 'does not hold'}")
    if args.plot:
        from rollhub.training.plot import plot_runs

        plot_runs(runs, Path(args.plot))
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
