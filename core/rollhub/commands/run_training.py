"""The training half of ``rollhub run``: a policy trainer gets the core's training loop
(:mod:`rollhub.training.loop`), a loop driver runs its own; both leave
``metrics.jsonl``, ``training.png``, checkpoints and, with ``[eval]``, ``eval.json``."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from rollhub.commands.checks import load_held_out
from rollhub.hubs.async_hub import AsyncHub
from rollhub.registry import build_options
from rollhub.runs.evaluation import EvalReport, evaluate
from rollhub.runs.report import can_plot
from rollhub.runs.run_dir import RunDir
from rollhub.training.before_after import (
    BEFORE_MISSING,
    base_eval_due,
    before_after_rows,
    before_missing,
)
from rollhub.training.checkpoint import latest_checkpoint
from rollhub.training.loop import TrainingLoop, planned_steps
from rollhub.training.plot import plot_training, read_metrics
from rollhub.training.recorder import StepRecorder, rewind_run
from rollhub.training.roles import LoopDriver, TrainerRole, role_of
from rollhub.training.sinks import MetricSink
from rollhub.training.trainer import DrivenRun

__all__ = ["build_sinks", "train"]

log = logging.getLogger(__name__)


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
    # on resume, the scores an earlier process of the run saved ("before" of the base
    # weights, or why there is none): kept, so resuming never loses or replaces them
    saved = _saved_evals(run_dir) if resume else {}
    evals: dict[str, Any] = {}
    held_out = load_held_out(cfg) if cfg.eval.dataset else []
    await hub.start()
    try:
        # a resumed run evaluates the base only if it trains from the base weights again
        step = _resume_step(hub, run_dir) if resume else 0
        if (missing := before_missing(saved, resume=resume, resume_step=step)) is not None:
            saved[BEFORE_MISSING] = missing
            _write_evals(run_dir, saved)  # at once: no reader takes trained weights as base
            log.warning('held-out "before" %s', missing)
        due = base_eval_due(saved, resume=resume, resume_step=step)
        if held_out and cfg.eval.before_training and due:
            print(f"evaluating the base policy on {len(held_out)} held-out prompts", flush=True)
            hub.set_weight_version(0)  # the base weights are version 0 of the run
            evals["before"] = await evaluate(hub, held_out, cfg.eval.n_samples, label="base")
            # saved now: a run killed during training still has its base scores
            _write_evals(run_dir, {**saved, "before": evals["before"].as_dict()})
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
        summary["eval"] = {**saved, **{k: v.as_dict() for k, v in evals.items()}}
        _write_evals(run_dir, summary["eval"])
    _print_before_after(history, {**_reports(saved), **evals})
    if BEFORE_MISSING in saved:
        print(f'held-out "before" {saved[BEFORE_MISSING]}')
    last = summary["last"] or {}
    print(
        f"trained {summary['steps']}/{summary['total_steps']} steps; weight version "
        f"{summary['weight_version']}; last reward {last.get('reward_mean')}"
    )
    return summary


def _resume_step(hub: AsyncHub, run_dir: Path) -> int:
    """The step a resumed run continues from: its loop's newest checkpoint (0: none, so it
    trains from the base weights again)."""
    trainer = hub.trainer
    if isinstance(trainer, LoopDriver):
        step = trainer.resume_step(run_dir)
        return len(read_metrics(RunDir(run_dir).metrics)) if step is None else step
    checkpoint = latest_checkpoint(run_dir)
    return 0 if checkpoint is None else checkpoint.steps_done


async def _drive(
    hub: AsyncHub,
    payloads: list[dict[str, Any]],
    run_dir: Path,
    sinks: list[MetricSink],
    resume: bool,
    progress: bool | None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Hand the run to a trainer that drives its own loop; it records its steps."""
    if not resume:
        RunDir(run_dir).refuse_a_second_run()
    history: list[dict[str, Any]] = []
    if resume:
        driver = hub.trainer
        step = driver.resume_step(run_dir) if isinstance(driver, LoopDriver) else None
        # steps recorded after the loop's newest checkpoint run again: never recorded twice
        history = read_metrics(RunDir(run_dir).metrics) if step is None else rewind_run(
            run_dir, step)  # fmt: skip
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


def _saved_evals(run_dir: Path) -> dict[str, Any]:
    """``eval.json`` of the run as saved so far (empty when there is none)."""
    saved = RunDir(run_dir).read_json(RunDir.EVAL)
    if saved is not None and not isinstance(saved, dict):
        log.warning("%s is not a JSON object; its scores are not kept", run_dir / RunDir.EVAL)
    return saved if isinstance(saved, dict) else {}


def _write_evals(run_dir: Path, evals: dict[str, Any]) -> None:
    """Write ``eval.json`` whole or not at all: a temporary file renamed over it, so a kill
    mid-write never leaves half a report in place of the saved one."""
    path = run_dir / RunDir.EVAL
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(evals, indent=2))
    os.replace(tmp, path)


def _reports(saved: dict[str, Any]) -> dict[str, EvalReport]:
    """The saved reports as :class:`EvalReport` again (for the before/after table); a report
    of another shape is left out of the table, not an error."""
    names = {f.name for f in dataclasses.fields(EvalReport)}
    reports = {}
    for key, value in saved.items():
        if key == BEFORE_MISSING:  # a sentence, not a report
            continue
        try:
            reports[key] = EvalReport(**{k: v for k, v in value.items() if k in names})
        except (AttributeError, TypeError):
            log.warning("eval.json's %r is not an eval report; not shown", key)
    return reports


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
