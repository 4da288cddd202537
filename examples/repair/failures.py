"""Why episodes of the repair environment failed, read from a run's episodes.

Each episode's result holds the shell commands the agent ran and the scoring check's
output (``FAIL: config/port holds '80'; it must hold 8123``); with the task rebuilt from
its seed, that is enough to say which step of the solution was missing::

    python examples/repair/failures.py runs/repair-strands-…/episodes.jsonl [--steps 13-16]

Causes, first match wins:

- ``no command``: the agent never called its tool;
- ``never ran the check``: depth 2 and 3, where only the check says what is wrong;
- ``never read the note``: depth 3, where the value is written in a note the check names;
- ``wrote another file``: the setting still holds its wrong value, and a command wrote
  somewhere (``echo 5247 > limit`` instead of ``> etc/limit``);
- ``never wrote``: the setting still holds its wrong value, and no command wrote anything
  (the check run again and again is the common case);
- ``setting emptied``: the file was truncated or removed;
- ``wrong value``: the file holds something else than the value the check wants.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tasks import Task, make_task

__all__ = ["CAUSES", "failure_cause", "failure_table"]

CAUSES = (
    "no command",
    "never ran the check",
    "never read the note",
    "wrote another file",
    "never wrote",
    "setting emptied",
    "wrong value",
)

_HOLDS = re.compile(r"holds '(.*?)'; it must hold")


def failure_cause(task: Task, commands: list[str], check_output: str) -> str:
    """The first missing step of a failed episode on ``task`` (one of :data:`CAUSES`)."""
    if not commands:
        return "no command"
    if task.depth >= 2 and not any("check.sh" in c for c in commands):
        return "never ran the check"
    if task.note and not any(_reads(c, task.note) for c in commands):
        return "never read the note"
    match = _HOLDS.search(check_output)
    held = match.group(1).strip() if match else ""
    if held == task.wrong:
        writes = any(re.search(r">|\btee\b|sed -i|\bcp\b|\bmv\b", c) for c in commands)
        return "wrote another file" if writes else "never wrote"
    if not held:
        return "setting emptied"
    return "wrong value"


def _reads(command: str, note: str) -> bool:
    folder = note.split("/")[0]
    return note in command or ("cat" in command and f"{folder}/" in command)


def _field(row: Mapping[str, Any], name: str) -> Any:
    value = row.get(name)
    return json.loads(value) if isinstance(value, str) else value


def failure_table(rows: Iterable[Mapping[str, Any]]) -> dict[str, Counter[str]]:
    """Split → counts of ``success`` and of each failure cause, over finished episodes."""
    table: dict[str, Counter[str]] = defaultdict(Counter)
    for row in rows:
        if row.get("status") != "ok":
            continue
        payload, result = _field(row, "payload"), _field(row, "result") or {}
        task = make_task(int(payload["seed"]), int(payload["depth"]))
        if (row.get("reward") or 0.0) >= 1.0:
            table[task.split]["success"] += 1
            continue
        commands = [c["command"] for c in result.get("metrics", {}).get("commands", [])]
        output = result.get("check", {}).get("output", "")
        table[task.split][failure_cause(task, commands, output)] += 1
    return dict(sorted(table.items()))


def _steps(text: str | None) -> range | None:
    if not text:
        return None
    first, _, last = text.partition("-")
    return range(int(first), int(last or first) + 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("episodes", type=Path, help="a run's episodes.jsonl")
    parser.add_argument("--steps", help="only these steps, 1-based (e.g. 13-16)")
    args = parser.parse_args()
    steps = _steps(args.steps)
    rows = [json.loads(line) for line in args.episodes.read_text().splitlines() if line]
    if steps is not None:
        rows = [r for r in rows if r.get("step", 0) + 1 in steps]
    table = failure_table(rows)
    columns = ("success", *CAUSES)
    print("| split | episodes | " + " | ".join(columns) + " |")
    print("| --- " * (len(columns) + 2) + "|")
    for split, counts in table.items():
        total = sum(counts.values())
        cells = " | ".join(str(counts.get(c, 0)) for c in columns)
        print(f"| {split} | {total} | {cells} |")


if __name__ == "__main__":
    main()
