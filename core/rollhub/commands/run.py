"""``rollhub run CONFIG``: run an experiment end to end.

Loads the dataset, runs every prompt × n samples through the hub, feeds finished groups to
the configured trainer, shows progress, and leaves in a new run directory: the trainer's
outputs (``episodes.parquet`` / ``episodes.jsonl`` for ``export``), ``summary.json``,
``plots.png``, ``config.json`` (the resolved config) and a copy of the config file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import shutil
import time
from pathlib import Path
from typing import Any

from rollhub.config import RollhubConfig, load_config
from rollhub.dataset import load_jsonl_dataset
from rollhub.episode import Episode
from rollhub.errors import ConfigError
from rollhub.markers import hookimpl

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare this subcommand's arguments."""
    parser.add_argument("config", help="path to rollhub.toml")
    parser.add_argument("--max-prompts", type=int, default=None, help="use only the first N prompts")
    parser.add_argument("--n-samples", type=int, default=None, help="samples per prompt")
    parser.add_argument("--run-dir", default=None, help="output directory (default: a new one)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    """Run the subcommand; return the exit code (errors are raised as rollhub errors)."""
    cfg = load_config(args.config)
    if args.max_prompts is not None:
        cfg.experiment.max_prompts = args.max_prompts
    if args.n_samples is not None:
        cfg.experiment.n_samples = args.n_samples
    if args.no_progress:
        cfg.experiment.progress = False
    _configure_logging(cfg)
    if not cfg.experiment.dataset:
        raise ConfigError("experiment.dataset is not set; point it at a JSONL file of prompts",
                          field="experiment.dataset")
    payloads = load_jsonl_dataset(
        cfg.path(cfg.experiment.dataset), id_field=cfg.experiment.id_field,
        limit=cfg.experiment.max_prompts,
    )
    run_dir = Path(args.run_dir) if args.run_dir else _new_run_dir(cfg)
    run_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(args.config, run_dir / "rollhub.toml")
    (run_dir / "config.json").write_text(json.dumps(cfg.to_toml_dict(), indent=2, sort_keys=True))
    summary = asyncio.run(run_experiment(cfg, payloads, run_dir))
    failed = summary["failed"]
    print(f"\nrun directory: {run_dir}")
    for name in ("episodes.parquet", "episodes.jsonl", "summary.json", "plots.png"):
        if (run_dir / name).exists():
            print(f"  {name:<17} {run_dir / name}")
    return 1 if summary["episodes"] and failed == summary["episodes"] else 0


async def run_experiment(cfg: RollhubConfig, payloads: list[dict[str, Any]], run_dir: Path) -> dict[str, Any]:
    """Run the experiment on a hub; return the summary (also written to ``run_dir``)."""
    from rich.console import Console

    from rollhub.hub import AsyncHub
    from rollhub.progress import RolloutProgress
    from rollhub.report import plot_run, render_summary, summarize, write_summary

    total = len(payloads) * cfg.experiment.n_samples
    episodes: list[Episode] = []
    progress = RolloutProgress(total, enabled=cfg.experiment.progress, description="episodes")
    t0 = time.monotonic()
    tokens, rewards = 0, []

    class _Observer:
        @hookimpl
        def rollhub_prepare_rollout(self) -> None:
            progress.started()

        @hookimpl
        def rollhub_episode_done(self, episode: Episode) -> None:
            nonlocal tokens
            tokens += episode.num_sampled_tokens
            if episode.ok and episode.reward is not None:
                rewards.append(episode.reward)
            progress.finished(episode.status)
            mean = f"{sum(rewards) / len(rewards):.3f}" if rewards else "-"
            progress.note(f"{tokens / max(time.monotonic() - t0, 1e-9):.1f} tok/s  reward {mean}")

    hub = AsyncHub(cfg, run_dir=run_dir)
    hub.host.register(_Observer(), name="rollhub.run.progress", source="builtin")
    with progress:
        async with hub:
            async for group in hub.iter_groups(payloads):
                episodes.extend(group.episodes)
                await hub.trainer.consume(group)
    wall = time.monotonic() - t0
    summary = summarize(episodes, wall_time_s=wall, success_threshold=cfg.rewards.success_threshold)
    write_summary(summary, run_dir / "summary.json")
    if episodes:
        plot_run(episodes, run_dir / "plots.png")
    Console().print(render_summary(summary))
    return summary


def _new_run_dir(cfg: RollhubConfig) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = cfg.path(cfg.experiment.output_dir).resolve() / f"{cfg.experiment.name}-{stamp}"
    path, i = base, 1
    while path.exists():
        i += 1
        path = base.with_name(f"{base.name}-{i}")
    return path


def _configure_logging(cfg: RollhubConfig) -> None:
    root = logging.getLogger()
    if cfg.logging.file:
        handler = logging.FileHandler(cfg.path(cfg.logging.file))
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
    logging.getLogger("rollhub").setLevel(cfg.logging.level)
