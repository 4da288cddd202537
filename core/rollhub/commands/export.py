"""``rollhub export``: convert exported episodes between Parquet and JSONL."""

from __future__ import annotations

import argparse

from rollhub.errors import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", help="episodes file (.parquet or .jsonl)")
    parser.add_argument("dest", help="output file (.parquet or .jsonl)")


def run(args: argparse.Namespace) -> int:
    raise UsageError("'rollhub export' is not yet available in this build")
