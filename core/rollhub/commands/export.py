"""``rollhub export SRC DEST``: convert exported episodes between Parquet and JSONL.

Rows are validated on the way (schema version, trace alignment), so a converted file is
always readable by :func:`rollhub.export.read_episodes`.
"""

from __future__ import annotations

import argparse

from rollhub.export import episode_from_row, read_rows, write_rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare this subcommand's arguments."""
    parser.add_argument("source", help="episodes file (.parquet or .jsonl)")
    parser.add_argument("dest", help="output file (.parquet or .jsonl)")


def run(args: argparse.Namespace) -> int:
    """Run the subcommand; return the exit code (errors are raised as rollhub errors)."""
    rows = read_rows(args.source)
    for row in rows:
        episode_from_row(row)  # validates before anything is written
    path = write_rows(rows, args.dest)
    print(f"wrote {len(rows)} episodes to {path}")
    return 0
