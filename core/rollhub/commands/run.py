"""``rollhub run CONFIG``: run an experiment end to end.

With a trainer that consumes (``export``, the default): runs every prompt × n samples
through the hub once, feeds finished groups to the trainer, and leaves in a new run
directory the trainer's outputs (``episodes.parquet`` / ``episodes.jsonl``),
``summary.json`` and ``plots.png``.

With a trainer that trains (``tinker``, a user's own): runs the core's training loop
(:mod:`rollhub.training.loop`) and leaves ``metrics.jsonl``, ``training.png`` and
``checkpoints/``; ``rollhub run --resume RUN_DIR`` continues from the last checkpoint.

Both write ``config.json`` (the resolved config), a copy of the config file and
``run.json`` (where the config came from, for ``--resume``).
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

from rollhub.config import RollhubConfig, build_options, load_config
from rollhub.dataset import load_jsonl_dataset
from rollhub.episode import Episode
from rollhub.errors import ConfigError, UsageError
from rollhub.markers import hookimpl

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare this subcommand's arguments."""
    parser.add_argument(
        "config", nargs="?", default=None,
        help="path to rollhub.toml (with --resume: default, the config the run was started with)",
    )
    parser.add_argument("--max-prompts", type=int, default=None, help="use only the first N prompts")
    parser.add_argument("--n-samples", type=int, default=None, help="samples per prompt")
    parser.add_argument("--run-dir", default=None, help="output directory (default: a new one)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--resume", metavar="RUN_DIR", default=None,
        help="continue a training run from its last checkpoint",
    )


def run(args: argparse.Namespace) -> int:
    """Run the subcommand; return the exit code (errors are raised as rollhub errors)."""
    config_path = _config_path(args)
    cfg = load_config(config_path)
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
    if args.resume:
        run_dir = Path(args.resume)
    else:
        run_dir = Path(args.run_dir) if args.run_dir else _new_run_dir(cfg)
        run_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(config_path, run_dir / "rollhub.toml")
        (run_dir / "config.json").write_text(
            json.dumps(cfg.to_toml_dict(), indent=2, sort_keys=True)
        )
        (run_dir / "run.json").write_text(
            json.dumps({"config": str(Path(config_path).resolve())}, indent=2)
        )
    summary = asyncio.run(run_experiment(cfg, payloads, run_dir, resume=bool(args.resume)))
    print(f"\nrun directory: {run_dir}")
    for name in ("episodes.parquet", "episodes.jsonl", "summary.json", "plots.png",
                 "metrics.jsonl", "training.png", "checkpoints"):
        if (run_dir / name).exists():
            print(f"  {name:<17} {run_dir / name}")
    if "episodes" not in summary:  # a training run: it failed loudly if it failed
        return 0
    failed = summary["failed"]
    return 1 if summary["episodes"] and failed == summary["episodes"] else 0


def _config_path(args: argparse.Namespace) -> str:
    if args.config:
        return args.config
    if not args.resume:
        raise UsageError("rollhub run needs a config file: rollhub run rollhub.toml")
    run_dir = Path(args.resume)
    if not run_dir.is_dir():
        raise UsageError(f"--resume {run_dir}: no such run directory")
    try:
        return json.loads((run_dir / "run.json").read_text())["config"]
    except (OSError, ValueError, KeyError):
        copy = run_dir / "rollhub.toml"
        if copy.exists():
            return str(copy)
        raise UsageError(
            f"--resume {run_dir}: cannot tell which config started this run; pass it: "
            f"rollhub run CONFIG --resume {run_dir}"
        ) from None


async def run_experiment(
    cfg: RollhubConfig, payloads: list[dict[str, Any]], run_dir: Path, *, resume: bool = False
) -> dict[str, Any]:
    """Run the experiment on a hub; return the summary (also written to ``run_dir``).

    A trainer that trains gets the training loop; any other consumes one pass.
    """
    from rollhub.hub import AsyncHub

    hub = AsyncHub(cfg, run_dir=run_dir)
    trainer_cls, _ = build_options(
        hub.host.registry, "trainer", cfg.trainer.name, cfg.trainer.options, section="trainer"
    )
    if getattr(trainer_cls, "trains", False):
        return await train(hub, payloads, run_dir, resume=resume)
    if resume:
        raise UsageError(
            f"--resume continues training runs; trainer {cfg.trainer.name!r} does not train"
        )
    return await consume_once(hub, payloads, run_dir)


async def train(hub: Any, payloads: list[dict[str, Any]], run_dir: Path, *,
                resume: bool) -> dict[str, Any]:
    """The training loop over ``payloads``; leaves metrics, checkpoints and training.png."""
    from rollhub.training.loop import TrainingLoop
    from rollhub.training.plot import plot_training

    cfg = hub.config
    async with hub:
        sinks = build_sinks(hub, run_dir)
        loop = TrainingLoop(hub, payloads, run_dir=run_dir, sinks=sinks, resume=resume,
                            progress=None if cfg.experiment.progress else False)
        try:
            summary = await loop.run()
        finally:
            plot_training(run_dir / "metrics.jsonl", run_dir / "training.png")
    last = summary["last"] or {}
    print(f"trained {summary['steps']}/{summary['total_steps']} steps; weight version "
          f"{summary['weight_version']}; last reward {last.get('reward_mean')}")
    return summary


def build_sinks(hub: Any, run_dir: Path) -> list[Any]:
    """The metric sinks named in ``[training] metric_sinks``, built and validated."""
    cfg = hub.config
    sinks = []
    for name in cfg.training.metric_sinks:
        cls, opts = build_options(
            hub.host.registry, "metric_sink", name, cfg.training.sinks.get(name, {}),
            section=f"training.sinks.{name}",
        )
        sinks.append(cls(opts, run_dir=run_dir, run_name=run_dir.name, config=cfg.to_toml_dict()))
    return sinks


async def consume_once(hub: Any, payloads: list[dict[str, Any]], run_dir: Path) -> dict[str, Any]:
    """One pass: every prompt × n samples, each finished group to the trainer."""
    from rich.console import Console

    from rollhub.progress import RolloutProgress
    from rollhub.report import plot_run, render_summary, summarize, write_summary

    cfg = hub.config
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
