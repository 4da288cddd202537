"""``rollhub eval CONFIG``: score a policy on held-out prompts.

What is evaluated:

- the base model of the config's token source (default);
- a training run's checkpoint, ``--checkpoint RUN_DIR`` (its latest) or
  ``--checkpoint RUN_DIR/checkpoints/step-N``: its trained parameters are loaded over the
  gateway's ``transformers`` engine (with ``[[policies]]``: each policy's over its own);
  a trainer that keeps its own checkpoints finds them through the plugins'
  ``rollhub_trained_weights`` hook (TRL's ``RUN_DIR/trl/checkpoint-N``);
- any OpenAI-compatible endpoint, ``--base-url URL --model-id NAME`` (no token capture).

The prompts are ``[eval] dataset`` (or ``--dataset``), each sampled ``[eval] n_samples``
times (``-n``). The report (pass@1, pass@k, mean reward, tool-call rate, turns, failures
by cause; per split and per policy) is printed and written as JSON: next to the
checkpoint's run, or ``--out``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rollhub.commands.closed_console import outlive_closed_console
from rollhub.commands.sigterm import run_command
from rollhub.config import RollhubConfig, TokenSourceSection, TrainerSection, load_config
from rollhub.episode import Episode
from rollhub.errors import ConfigError, UsageError
from rollhub.export.files import episode_to_row, write_rows
from rollhub.plugins import PluginHost, build_host
from rollhub.runs.run_dir import RunDir

if TYPE_CHECKING:
    from rich.table import Table

__all__ = ["add_arguments", "resolve_checkpoint", "run"]

#: the trained parameters in a checkpoint, by name (safetensors)
POLICY_FILE = "policy.safetensors"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare this subcommand's arguments."""
    parser.add_argument("config", help="rollhub.toml (agent, token source, [eval] dataset)")
    what = parser.add_mutually_exclusive_group()
    what.add_argument(
        "--checkpoint",
        help="RUN_DIR (its latest checkpoint) or a step-N (or trl/checkpoint-N) folder",
    )
    what.add_argument("--base-url", help="an OpenAI-compatible endpoint to evaluate instead")
    parser.add_argument("--model-id", help="model name at --base-url")
    parser.add_argument("--dataset", help="held-out prompts (default: [eval] dataset)")
    parser.add_argument("-n", "--n-samples", type=int, help="samples per prompt (pass@k: k = n)")
    parser.add_argument("--max-prompts", type=int, help="only the first N prompts")
    parser.add_argument("--out", help="report file (default: next to the checkpoint, or the "
                        "experiment's output_dir)")


def resolve_checkpoint(path: str | Path, host: PluginHost | None = None) -> Path:
    """The checkpoint folder of ``RUN_DIR`` (its latest) or of ``RUN_DIR/checkpoints/step-N``;
    else the one a plugin's trainer kept itself there (``rollhub_trained_weights``, e.g.
    TRL's ``RUN_DIR/trl/checkpoint-N``).

    :raises UsageError: nothing there holds trained parameters.
    """
    from rollhub.training.checkpoint import latest_checkpoint

    latest = latest_checkpoint(Path(path))
    p = latest.directory if latest is not None and latest.directory is not None else Path(path)
    weights = p / "trainer" / POLICY_FILE
    if weights.exists() or _policy_weights(p):
        return p
    found = host.hook.rollhub_trained_weights(path=Path(path)) if host is not None else None
    if found is not None and (Path(found) / POLICY_FILE).is_file():
        return Path(found)
    raise UsageError(
        f"--checkpoint {path}: no trained parameters at {weights}; give a run directory "
        f"of the torch trainer or one of its checkpoints/step-N folders, or of the trl "
        f"trainer (with train_layers set) or one of its trl/checkpoint-N folders"
    )


def _weights_file(ckpt: Path) -> Path:
    """The trained parameters of a single-policy checkpoint: the core loop's, or those of
    a checkpoint a trainer kept itself."""
    core = ckpt / "trainer" / POLICY_FILE
    return core if core.exists() else ckpt / POLICY_FILE


def evaluated_config(
    cfg: RollhubConfig, args: argparse.Namespace, host: PluginHost | None = None
) -> tuple[RollhubConfig, str]:
    """The config to evaluate with, and the label of what is evaluated (``host``: the
    plugins that may know a trainer's own checkpoints)."""
    cfg.trainer = TrainerSection(name="export")  # nothing trains or exports here
    if args.dataset:
        cfg.eval.dataset = str(Path(args.dataset).resolve())
    if args.n_samples:
        cfg.eval.n_samples = args.n_samples
    if args.max_prompts:
        cfg.eval.max_prompts = args.max_prompts
    if not cfg.eval.dataset:
        raise ConfigError(
            "no held-out prompts: set [eval] dataset in the config or pass --dataset",
            field="eval.dataset",
        )
    if args.base_url:
        if not args.model_id:
            raise UsageError("--base-url needs --model-id (the model name at that endpoint)")
        cfg.token_source = TokenSourceSection(
            name="none", base_url=args.base_url, model_id=args.model_id
        )
        return cfg, args.model_id
    if args.checkpoint:
        ckpt = resolve_checkpoint(args.checkpoint, host)
        _check_trained_model(cfg, ckpt)
        options = dict(cfg.token_source.options)
        engine = dict(options.get("engine") or {})
        if cfg.token_source.name != "gateway" or engine.get("name", "transformers") != "transformers":
            raise ConfigError(
                "--checkpoint loads trained parameters into the gateway's transformers engine; "
                "set [token_source] name = \"gateway\" with engine = { name = \"transformers\" }",
                field="token_source.engine",
            )
        if cfg.policies:
            _load_policy_weights(cfg, ckpt)
        else:
            engine["options"] = {**(engine.get("options") or {}),
                                 "weights": str(_weights_file(ckpt))}
        options["engine"] = {"name": "transformers", **engine}
        cfg.token_source = TokenSourceSection(name="gateway", **options)
        return cfg, str(ckpt)
    for policy in cfg.policies:
        policy.trainable = False  # served as they are: nothing trains here
    return cfg, "base"


def _check_trained_model(cfg: RollhubConfig, ckpt: Path) -> None:
    """Refuse a checkpoint trained on another model than the engine would serve: its
    trained layers would be loaded over a model nobody trained (same shapes, no error)."""
    from rollhub_gateway.engines.configured import engine_model

    served = engine_model(cfg)
    # one trainer's record, or one per policy of a run with several
    for record in [ckpt / "trainer" / "model.json", ckpt / "model.json",
                   *sorted((ckpt / "trainer" / "policies").glob("*/model.json"))]:  # fmt: skip
        try:
            trained = str(json.loads(record.read_text())["model"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a checkpoint that does not say (an older one, another trainer's)
        if trained == served or (
            Path(trained).expanduser().exists()
            and Path(trained).expanduser().resolve() == Path(served).expanduser().resolve()
        ):
            continue
        raise ConfigError(
            f"--checkpoint {ckpt} trained {trained!r} ({record.parent.name}), but the engine "
            f"would serve {served!r}; evaluate with the config the run trained with (its model)",
            field="token_source.engine.options.model",
        )


def _policy_weights(ckpt: Path) -> dict[str, Path]:
    """Policy name → its trained parameters in a checkpoint of several policies."""
    root = ckpt / "trainer" / "policies"
    return {p.parent.name: p for p in sorted(root.glob(f"*/{POLICY_FILE}"))}


def _load_policy_weights(cfg: RollhubConfig, ckpt: Path) -> None:
    """Serve each ``[[policies]]`` entry with its trained parameters from ``ckpt``.

    :raises UsageError: a trainable policy has none there (another run's checkpoint).
    """
    found = _policy_weights(ckpt)
    for policy in cfg.policies:
        if policy.trainable:
            if policy.name not in found:
                raise UsageError(
                    f"--checkpoint {ckpt}: no trained parameters of policy {policy.name!r} "
                    f"(it holds: {', '.join(found) or 'none'}); evaluate the run's own config"
                )
            policy.weights = str(found[policy.name])
        policy.trainable = False  # served as they are: nothing trains here


def run(args: argparse.Namespace) -> int:
    """Run the subcommand; return the exit code. A console that goes away does not stop it
    (:mod:`rollhub.commands.closed_console`): the report is still written."""
    with outlive_closed_console("the evaluation"):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from rollhub.commands.checks import check_run_config, load_held_out
    from rollhub.runs.manifest import build_manifest

    loaded = load_config(args.config)
    host = build_host(modules=loaded.plugins.modules, search_dir=loaded.base_dir)
    cfg, label = evaluated_config(loaded, args, host)
    check_run_config(cfg, host)
    payloads = load_held_out(cfg)
    if args.out:
        out = Path(args.out)
    elif args.checkpoint:
        ckpt = Path(label)  # evaluated_config resolved it
        out = RunDir(ckpt.parent.parent).checkpoint_report(ckpt)  # RUN/checkpoints/step-N
    else:
        out = cfg.path(cfg.experiment.output_dir) / f"eval-{time.strftime('%Y%m%d-%H%M%S')}.json"
    episodes: list[Episode] = []
    report = run_command(_evaluate(cfg, host, payloads, label, episodes))
    report["manifest"] = build_manifest(cfg, config_file=args.config)
    Console().print(report_table(report))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    # the episodes beside the report: what failed, and why, is read from them
    kept = write_rows(
        (episode_to_row(e, cfg.experiment.name) for e in episodes), episodes_path(out)
    )
    print(f"\nreport: {out}\nepisodes: {kept}")
    failed = sum(report["failures"].values())
    return 1 if report["samples"] and failed == report["samples"] else 0


def report_table(report: dict[str, Any]) -> Table:
    """The printed form of an eval report: its figures with 95% intervals, then a row per
    split."""
    from rich.table import Table

    def ci(figures: dict[str, Any], key: str) -> str:
        value, bounds = figures.get(key), figures.get(f"{key}_ci")
        if value is None:
            return "-"
        return f"{value:.3f} [{bounds[0]:.3f}, {bounds[1]:.3f}]" if bounds else f"{value:.3f}"

    table = Table(title=f"eval: {report['label']}  (95% intervals, resampling prompts; for "
                  "pass@1 never narrower than Wilson's over samples)")
    for name in ("split", "prompts", "samples", "pass@1", f"pass@{report['k']}", "reward",
                 "tool-call rate", "failures"):
        table.add_column(name, justify="left" if name in ("split", "failures") else "right")
    rows = [("all", report), *sorted(report.get("splits", {}).items()),
            *[(f"policy {name}", figures) for name, figures in report.get("policies", {}).items()]]
    for name, figures in rows:
        failures = ", ".join(f"{k}={v}" for k, v in figures.get("failures", {}).items())
        table.add_row(
            name, str(figures["prompts"]), str(figures["samples"]), ci(figures, "pass_at_1"),
            f"{figures['pass_at_k']:.3f}", ci(figures, "reward_mean"),
            f"{figures['tool_call_rate']:.3f}", failures or "-",
        )
    return table


def episodes_path(report: Path) -> Path:
    """Where ``rollhub eval`` keeps the episodes of the report at ``report``."""
    return report.with_name(f"{report.stem}.episodes.jsonl")


async def _evaluate(
    cfg: RollhubConfig,
    host: PluginHost,
    payloads: list[dict[str, Any]],
    label: str,
    keep: list[Episode],
) -> dict[str, Any]:
    from rollhub.hubs.async_hub import AsyncHub
    from rollhub.runs.evaluation import evaluate

    # nothing trains here: the hub's export trainer gets a scratch folder, so the report's
    # folder holds the report and its episodes, not empty exports
    with tempfile.TemporaryDirectory(prefix="rollhub-eval-") as scratch:
        hub = AsyncHub(cfg, host=host, run_dir=Path(scratch))
        await hub.start()
        try:
            report = await evaluate(hub, payloads, cfg.eval.n_samples, label=label, keep=keep)
        finally:
            await hub.close()
    return report.as_dict()
