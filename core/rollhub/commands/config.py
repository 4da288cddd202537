"""``rollhub config check FILE``: validate a config and every component it names."""

from __future__ import annotations

import argparse

from rollhub.config import build_options, load_config
from rollhub.plugins import build_host, check_config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare this subcommand's arguments."""
    sub = parser.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    check = sub.add_parser("check", help="validate a rollhub.toml and its component options")
    check.add_argument("file", help="path to rollhub.toml")


def run(args: argparse.Namespace) -> int:
    """Run the subcommand; return the exit code (errors are raised as rollhub errors)."""
    cfg = load_config(args.file)
    host = build_host(modules=cfg.plugins.modules, search_dir=cfg.base_dir)
    check_config(host, cfg)
    reg = host.registry
    build_options(reg, "runtime", cfg.runtime.name, cfg.runtime.options, section="runtime")
    reg.get("store", cfg.store.scheme, field="store.url")
    build_options(
        reg, "token_source", cfg.token_source.name, cfg.token_source.options, section="token_source"
    )
    build_options(reg, "trainer", cfg.trainer.name, cfg.trainer.options, section="trainer")
    print(
        f"{args.file}: ok (runtime={cfg.runtime.name}, store={cfg.store.url}, "
        f"token_source={cfg.token_source.name}, trainer={cfg.trainer.name})"
    )
    return 0
