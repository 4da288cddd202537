"""``rollhub run CONFIG``: run an experiment end to end.

With a trainer that consumes (``export``, the default): runs every prompt × n samples
through the hub once, feeds finished groups to the trainer, and leaves in a new run
directory the trainer's outputs (``episodes.parquet`` / ``episodes.jsonl``),
``summary.json`` and ``plots.png``.

With a trainer that trains (a policy trainer such as ``torch`` or ``tinker``: the core's
training loop, :mod:`rollhub.training.loop`; a loop driver such as ``trl``: its own loop):
leaves ``metrics.jsonl``, ``training.png`` and ``checkpoints/``; ``rollhub run --resume
RUN_DIR`` continues from the last checkpoint. A launched backend (``verl``, ``slime``) is
refused with the command that launches it.

Both write ``config.json`` (the resolved config), a copy of the config file,
``run.json`` (where the config came from, for ``--resume``) and ``manifest.json`` (the
code, versions and machine that produced the run; see :mod:`rollhub.runs.run_dir`).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, cast

from rollhub.commands.checks import check_run_config, load_payloads
from rollhub.commands.closed_console import outlive_closed_console
from rollhub.commands.run_training import train
from rollhub.commands.sigterm import run_command
from rollhub.commands.store_watch import StoreWatch
from rollhub.config import RollhubConfig, load_config, parse_config
from rollhub.episode import Episode
from rollhub.errors import ClusterLost, UsageError
from rollhub.hubs.async_hub import AsyncHub
from rollhub.plugin_host.markers import hookimpl
from rollhub.plugins import PluginHost
from rollhub.registry import build_options
from rollhub.rollout import RolloutRequest
from rollhub.runs.manifest import build_manifest
from rollhub.runs.run_dir import RunDir, changed_settings, release_claims
from rollhub.training.roles import LaunchedBackend, TrainerRole, role_of

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare this subcommand's arguments."""
    parser.add_argument(
        "config",
        nargs="?",
        default=None,
        help="path to rollhub.toml (with --resume: default, the config the run was started with)",
    )
    parser.add_argument(
        "--max-prompts", type=int, default=None, help="use only the first N prompts"
    )
    parser.add_argument("--n-samples", type=int, default=None, help="samples per prompt")
    parser.add_argument("--run-dir", default=None, help="output directory (default: a new one)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--resume",
        metavar="RUN_DIR",
        default=None,
        help="continue a training run from its last checkpoint",
    )


def run(args: argparse.Namespace) -> int:
    """Run the subcommand; return the exit code (errors are raised as rollhub errors).

    Everything that can be checked without a rollout is checked before the run directory
    is created, so a rejected config leaves nothing behind. A console that goes away does
    not stop the run (:mod:`rollhub.commands.closed_console`).
    """
    with outlive_closed_console("the run"):
        try:
            return _run(args)
        finally:
            release_claims()


def _run(args: argparse.Namespace) -> int:
    config_path = _config_path(args)
    cfg = _load_config(args, config_path)
    _apply_overrides(cfg, args)
    _configure_logging(cfg, getattr(args, "log_level", None))
    if args.resume:
        RunDir(args.resume).claim()
        _say_changes(RunDir(args.resume), cfg)
    host = check_run_config(cfg)
    payloads = load_payloads(cfg)
    manifest = build_manifest(cfg, config_file=config_path)
    if args.resume:
        layout = RunDir(args.resume)
        layout.record_resume(manifest)
    else:
        layout = RunDir(args.run_dir if args.run_dir else _new_run_dir(cfg))
        layout.create(field="--run-dir" if args.run_dir else "experiment.output_dir")
        layout.claim()
        layout.refuse_a_second_run()  # before a file of the run there is touched
        layout.write_start(config_path, cfg.to_toml_dict(), manifest)
    run_dir = layout.path
    _share_plugin_modules(cfg)
    outputs: dict[str, Any] = {}
    try:
        summary = run_command(
            run_experiment(cfg, payloads, run_dir, resume=bool(args.resume), host=host, outputs=outputs)
        )
    except ClusterLost as exc:  # say which run to resume
        raise ClusterLost(f"{exc} Then: rollhub run --resume {run_dir}", **exc.context) from exc
    except KeyboardInterrupt:  # the files so far stay; say where, and how to go on
        trains = _trains(cfg, host)
        print(f"\nrun directory: {run_dir} (interrupted)"
              + (f"; continue it with: rollhub run --resume {run_dir}" if trains else ""),
              file=sys.stderr)  # fmt: skip
        raise
    print(f"\nrun directory: {run_dir}")
    listed = set()
    for name in RunDir.OUTPUTS:
        if (run_dir / name).exists():
            listed.add(str((run_dir / name).resolve()))
            print(f"  {name:<17} {run_dir / name}")
    for key, value in outputs.items():
        # what the trainer's close() reported: its own files, and any other figures
        if key == "skipped" or (
            isinstance(value, (str, Path)) and str(Path(value).resolve()) in listed
        ):
            continue
        print(f"  {key:<17} {value}")
    missing = missing_extras(cfg, outputs)
    if missing:
        print(
            f"\nnote: {' and '.join(missing.values())} need extras: "
            f"pip install 'rollhub[{','.join(missing)}]'"
        )
    if "episodes" not in summary:  # a training run: it failed loudly if it failed
        return 0
    failed = summary["failed"]
    lost = summary.get("by_status", {}).get("store_error", 0)
    if lost:  # results the agents produced but could not store: the run is not whole
        print(f"\nerror: {lost} results could not be stored (store_error); the causes are "
              f"in the summary above", file=sys.stderr)
        return 1
    return 1 if summary["episodes"] and failed == summary["episodes"] else 0


_OVERRIDES = (("max_prompts", "--max-prompts"), ("n_samples", "--n-samples"))


def _apply_overrides(cfg: RollhubConfig, args: argparse.Namespace) -> None:
    """Command-line values over the file's; a bad value is a usage error naming the flag."""
    from pydantic import ValidationError

    for attr, flag in _OVERRIDES:
        value = getattr(args, attr)
        if value is None:
            continue
        try:
            setattr(cfg.experiment, attr, value)
        except ValidationError as exc:
            msg = exc.errors()[0]["msg"].lower()
            raise UsageError(
                f"{flag} {value}: {msg} (experiment.{attr}); pass a positive count"
            ) from None
    if args.no_progress:
        cfg.experiment.progress = False


def _share_plugin_modules(cfg: RollhubConfig) -> None:
    """Agent workers this process starts load the same ``[plugins] modules`` as the hub."""
    if not cfg.plugins.modules:
        return
    os.environ["ROLLHUB_PLUGIN_MODULES"] = ",".join(cfg.plugins.modules)
    paths = [str(cfg.base_dir), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))


def missing_extras(cfg: RollhubConfig, outputs: dict[str, Any]) -> dict[str, str]:
    """Optional outputs this run left out for want of a package: ``{extra: what}``."""
    from rollhub.runs.report import can_plot

    missing = {}
    if cfg.trainer.name == "export" and "parquet" in outputs.get("skipped", ()):
        missing["export"] = "Parquet files"
    if not can_plot():
        missing["plot"] = "plots"
    return missing


def _config_path(args: argparse.Namespace) -> str:
    if args.config:
        return args.config
    if not args.resume:
        raise UsageError("rollhub run needs a config file: rollhub run rollhub.toml")
    run_dir = Path(args.resume)
    if not run_dir.is_dir():
        raise UsageError(f"--resume {run_dir}: no such run directory")
    return RunDir(run_dir).config_source()


def _load_config(args: argparse.Namespace, config_path: str) -> RollhubConfig:
    """The run's config; resumed without a config file, the one the run started with."""
    if args.resume and not args.config:
        started = RunDir(args.resume).read_json(RunDir.CONFIG)
        if isinstance(started, dict):
            # environment overrides included: a control started with
            # ROLLHUB_TRAINER__LEARNING_RATE=0 stays one when resumed without it
            return parse_config(
                started,
                base_dir=Path(config_path).resolve().parent,
                source=str(Path(args.resume) / RunDir.CONFIG),
            )
    return load_config(config_path)


def _say_changes(layout: RunDir, cfg: RollhubConfig) -> None:
    """Name every setting a resumed run changes (an override, or an edited config file)."""
    started = layout.read_json(RunDir.CONFIG)
    if not isinstance(started, dict):
        return
    for key, (before, now) in changed_settings(started, cfg.to_toml_dict()).items():
        print(f"--resume: {key}: {before!r} when the run started, {now!r} now; the run goes "
              f"on with the new value", file=sys.stderr)  # fmt: skip


async def run_experiment(
    cfg: RollhubConfig,
    payloads: list[dict[str, Any]],
    run_dir: Path,
    *,
    resume: bool = False,
    host: PluginHost | None = None,
    outputs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run the experiment on a hub; return the summary (also written to ``run_dir``).

    A policy trainer or a loop driver trains; a consumer consumes one pass; a launched
    backend is refused.

    :raises UsageError: the trainer is a launched backend (the message says how to launch
        it), or ``resume`` with a consumer.
    :raises TrainerRoleError: the trainer class declares no role.

    :param host: the plugin host to use (default: built from ``cfg``).
    :param outputs: filled with what the trainer's ``close()`` returned (its files).
    """
    hub = AsyncHub(cfg, host=host, run_dir=run_dir)
    outputs = outputs if outputs is not None else {}
    trainer_cls, _ = build_options(
        hub.host.registry, "trainer", cfg.trainer.name, cfg.trainer.options, section="trainer"
    )
    role = role_of(trainer_cls)
    if role is TrainerRole.LAUNCHED_BACKEND:
        # refused before the hub starts a runtime or a gateway it would not use
        raise UsageError(cast(type[LaunchedBackend], trainer_cls).launch_hint)
    if role in (TrainerRole.POLICY_TRAINER, TrainerRole.LOOP_DRIVER):
        return await train(hub, payloads, run_dir, resume=resume, outputs=outputs)
    if resume:
        raise UsageError(
            f"--resume continues training runs; trainer {cfg.trainer.name!r} does not train"
        )
    return await consume_once(hub, payloads, run_dir, outputs=outputs)


def _trains(cfg: RollhubConfig, host: PluginHost) -> bool:
    """Whether ``cfg``'s trainer trains (a run that ``--resume`` continues)."""
    trainer_cls, _ = build_options(
        host.registry, "trainer", cfg.trainer.name, cfg.trainer.options, section="trainer"
    )
    return role_of(trainer_cls) in (TrainerRole.POLICY_TRAINER, TrainerRole.LOOP_DRIVER)


async def consume_once(
    hub: AsyncHub,
    payloads: list[dict[str, Any]],
    run_dir: Path,
    *,
    outputs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One pass: every prompt × n samples, each finished group to the trainer.

    The plot is drawn only when matplotlib is installed (the ``plot`` extra).
    """
    from rich.console import Console

    from rollhub.runs.report import can_plot, plot_run, render_summary, summarize, write_summary
    from rollhub.submission.progress import RolloutProgress

    cfg = hub.config
    total = len(payloads) * cfg.experiment.n_samples
    episodes: list[Episode] = []
    progress = RolloutProgress(total, enabled=cfg.experiment.progress, description="episodes")
    t0 = time.monotonic()
    tokens = 0
    rewards: list[float] = []
    stall_note = ""

    def show_stall(text: str) -> None:
        nonlocal stall_note
        stall_note = text
        progress.note(_note(tokens, rewards, t0, stall_note))

    watch = StoreWatch(
        None, lambda: progress.running, show_stall, stall_s=cfg.experiment.store_stall_warn_s
    )

    started: set[str] = set()

    class _Observer:
        @hookimpl
        def rollhub_prepare_rollout(self, request: RolloutRequest) -> None:
            # counted by session: a rollout whose submit is retried is still one rollout
            sid = request.rollout.session_id
            if sid not in started:
                started.add(sid)
                progress.started()

        @hookimpl
        def rollhub_episode_done(self, episode: Episode) -> None:
            nonlocal tokens
            tokens += episode.num_sampled_tokens
            if episode.ok and episode.reward is not None:
                rewards.append(episode.reward)
            progress.finished(episode.status)
            progress.note(_note(tokens, rewards, t0, stall_note))

    hub.host.register(_Observer(), name="rollhub.run.progress", source="builtin")
    with progress:
        await hub.start()
        watch.store = hub.store
        try:
            async with watch.watching():
                async for group in hub.iter_groups(payloads):
                    episodes.extend(group.episodes)
                    await hub.trainer.consume(group)
        finally:
            (outputs if outputs is not None else {}).update(await hub.close())
    wall = time.monotonic() - t0
    summary = summarize(episodes, wall_time_s=wall, success_threshold=cfg.rewards.success_threshold)
    write_summary(summary, run_dir / RunDir.SUMMARY)
    if episodes and can_plot():
        plot_run(episodes, run_dir / RunDir.PLOTS)
    Console().print(render_summary(summary))
    return summary


def _note(tokens: int, rewards: list[float], t0: float, stall: str) -> str:
    """The progress line's figures: throughput, mean reward, a stalled store."""
    mean = f"{sum(rewards) / len(rewards):.3f}" if rewards else "-"
    text = f"{tokens / max(time.monotonic() - t0, 1e-9):.1f} tok/s  reward {mean}"
    return f"{text}  {stall}" if stall else text


def _new_run_dir(cfg: RollhubConfig) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = cfg.path(cfg.experiment.output_dir).resolve() / f"{cfg.experiment.name}-{stamp}"
    path, i = base, 1
    while path.exists():
        i += 1
        path = base.with_name(f"{base.name}-{i}")
    return path


def _configure_logging(cfg: RollhubConfig, cli_level: str | None = None) -> None:
    """``--log-level`` when given wins; else ``[logging] level`` (default WARNING)."""
    root = logging.getLogger()
    if cfg.logging.file:
        handler = logging.FileHandler(cfg.path(cfg.logging.file))
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
    logging.getLogger("rollhub").setLevel(cli_level or cfg.logging.level)
