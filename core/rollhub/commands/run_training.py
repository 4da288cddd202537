"""The training half of ``rollhub run``: a policy trainer gets the core's training loop
(:mod:`rollhub.training.loop`), a loop driver runs its own; both leave
``metrics.jsonl``, ``training.png``, checkpoints and, with ``[eval]``, ``eval.json``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from rollhub.commands.checks import load_held_out
from rollhub.errors import UsageError
from rollhub.hubs.async_hub import AsyncHub
from rollhub.registry import build_options
from rollhub.runs.evaluation import evaluate
from rollhub.runs.report import can_plot
from rollhub.runs.run_dir import RunDir
from rollhub.training.before_after import before_after_rows
from rollhub.training.loop import TrainingLoop, planned_steps
from rollhub.training.plot import plot_training, read_metrics
from rollhub.training.recorder import StepRecorder
from rollhub.training.roles import TrainerRole, role_of
from rollhub.training.sinks import MetricSink
from rollhub.training.trainer import DrivenRun

__all__ = ["build_sinks", "train"]


async def train(
    hub: AsyncHub,
    payloads: list[dict[str, Any]],
    run_dir: Path,
    *,
    resume: bool,
    outputs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The training loop over ``payloads``; leaves metrics, checkpoints and training.png."""
    cfg = hub.config
    evals: dict[str, Any] = {}
    held_out = load_held_out(cfg) if cfg.eval.dataset else []
    await hub.start()
    try:
        if held_out and cfg.eval.before_training and not resume:
            print(f"evaluating the base policy on {len(held_out)} held-out prompts", flush=True)
            hub.set_weight_version(0)  # the base weights are version 0 of the run
            evals["before"] = await evaluate(hub, held_out, cfg.eval.n_samples, label="base")
        sinks = build_sinks(hub, run_dir)
        progress = None if cfg.experiment.progress else False
        try:
            if role_of(type(hub.trainer)) is TrainerRole.LOOP_DRIVER:
                summary, history = await _drive(hub, payloads, run_dir, sinks, resume, progress)
            else:
                loop = TrainingLoop(
                    hub, payloads, run_dir=run_dir, sinks=sinks, resume=resume, progress=progress
                )
                summary = await loop.run()
                history = loop.history
        finally:
            if can_plot():
                plot_training(RunDir(run_dir).metrics, run_dir / RunDir.TRAINING_PLOT)
        if held_out and cfg.eval.after_training:
            print(f"evaluating the trained policy on {len(held_out)} held-out prompts", flush=True)
            evals["after"] = await evaluate(
                hub, held_out, cfg.eval.n_samples, label=f"step {summary['steps']}"
            )
    finally:
        (outputs if outputs is not None else {}).update(await hub.close())
    if evals:
        summary["eval"] = {k: v.as_dict() for k, v in evals.items()}
        RunDir(run_dir).write_json(RunDir.EVAL, summary["eval"])
    _print_before_after(history, evals)
    last = summary["last"] or {}
    print(
        f"trained {summary['steps']}/{summary['total_steps']} steps; weight version "
        f"{summary['weight_version']}; last reward {last.get('reward_mean')}"
    )
    return summary


async def _drive(
    hub: AsyncHub,
    payloads: list[dict[str, Any]],
    run_dir: Path,
    sinks: list[MetricSink],
    resume: bool,
    progress: bool | None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Hand the run to a trainer that drives its own loop; it records its steps."""
    if not resume and RunDir(run_dir).metrics.exists():
        raise UsageError(
            f"{run_dir} already holds a run; resume it with --resume or pick a new run directory"
        )
    history = read_metrics(RunDir(run_dir).metrics) if resume else []
    recorder = StepRecorder(
        hub, run_dir, total_steps=planned_steps(hub.config, len(payloads)), sinks=sinks,
        history=history, progress=progress,
    )
    try:
        with recorder:
            summary = await hub.trainer.drive(
                DrivenRun(hub=hub, payloads=payloads, recorder=recorder, run_dir=run_dir,
                          resume=resume)
            )
    finally:
        history = recorder.history
    return summary, history


def _print_before_after(history: list[dict[str, Any]], evals: dict[str, Any]) -> None:

    rows = before_after_rows(history, evals.get("before"), evals.get("after"))
    if not rows:
        return
    table = Table(title="before / after training")
    for name in ("", "metric", "before", "after"):
        table.add_column(name, justify="right" if name in ("before", "after") else "left")
    shown = None
    for section, metric, before, after in rows:
        table.add_row(section if section != shown else "", metric, before, after)
        shown = section
    Console().print(table)


def build_sinks(hub: AsyncHub, run_dir: Path) -> list[MetricSink]:
    """The metric sinks named in ``[training] metric_sinks``, built and validated."""
    cfg = hub.config
    sinks = []
    for name in cfg.training.metric_sinks:
        cls, opts = build_options(
            hub.host.registry,
            "metric_sink",
            name,
            cfg.training.sinks.get(name, {}),
            section=f"training.sinks.{name}",
        )
        sinks.append(cls(opts, run_dir=run_dir, run_name=run_dir.name, config=cfg.to_toml_dict()))
    return sinks
