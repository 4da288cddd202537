"""``rollhub config check FILE``: everything ``rollhub run`` would check before a rollout.

Plugin settings, every component's name and options, the store URL (and a ``file://``
store's directory), the agent app reference, the output directory and the dataset, every
line and id of it.
"""

from __future__ import annotations

import argparse

from rollhub.commands.checks import check_run_config, load_payloads
from rollhub.config import load_config
from rollhub.training.roles import TrainerRole, role_of


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare this subcommand's arguments."""
    sub = parser.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    check = sub.add_parser("check", help="validate a rollhub.toml, its components and dataset")
    check.add_argument("file", help="path to rollhub.toml")


def run(args: argparse.Namespace) -> int:
    """Run the subcommand; return the exit code (errors are raised as rollhub errors)."""
    cfg = load_config(args.file)
    host = check_run_config(cfg)
    dataset = ""
    trainer = host.registry.get("trainer", cfg.trainer.name, field="trainer.name")
    # a launched backend (verl, slime) brings its own prompts; everything else reads these
    if cfg.experiment.dataset or role_of(trainer) is not TrainerRole.LAUNCHED_BACKEND:
        dataset = f", dataset={len(load_payloads(cfg))} prompts"
    print(
        f"{args.file}: ok (runtime={cfg.runtime.name}, store={cfg.store.url}, "
        f"token_source={cfg.token_source.name}, trainer={cfg.trainer.name}{dataset})"
    )
    return 0
