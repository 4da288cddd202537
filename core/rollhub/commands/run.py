"""``rollhub run CONFIG``: run an experiment end to end."""

from __future__ import annotations

import argparse

from rollhub.errors import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="path to rollhub.toml")


def run(args: argparse.Namespace) -> int:
    raise UsageError("'rollhub run' is not yet available in this build")
