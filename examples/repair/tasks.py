"""The repair environment: small generated workspaces whose check fails until a setting is
fixed. The generator, the workspace's files and the check that scores an episode live here;
the Strands and LangGraph agents and the tests all import this one module.

A task is made from ``(seed, depth)`` alone, so a dataset line is just
``{"id", "seed", "depth", "split"}``. Every workspace holds a small service: setting files
(one value per file), a ``README`` and ``check.sh``, which prints what is wrong and exits 1
until the setting holds the value the service needs. ``depth`` is how many shell commands
the natural solution takes, because of what the prompt does not say:

- depth 1: the prompt names the file and the value: write it (``echo 8123 > config/port``);
- depth 2: the prompt names neither: run the check, read which file must hold which value,
  write it;
- depth 3: the check names the file and where the value is written down (``notes/…``):
  run the check, read that note, write the value.

The reward is execution alone: :func:`check_command` is run in the sandbox after the agent
stops (exit code 0 scores 1.0). It carries the expected value itself rather than running the
workspace's ``check.sh``, so an agent that edits the check or the note earns nothing. The
agent's reply is never read.

    python examples/repair/tasks.py --write examples/repair/data   # the datasets
    python examples/repair/tasks.py --show 17 --depth 3            # one task's files
"""

from __future__ import annotations

import argparse
import json
import random
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "SHOTS",
    "SYSTEM_PROMPT",
    "TOOL_DESCRIPTION",
    "Task",
    "check_command",
    "dataset_rows",
    "format_result",
    "make_task",
]

SYSTEM_PROMPT = (
    "You fix small software workspaces. Use the shell tool to run commands in the "
    "workspace. When `sh check.sh` passes, reply with one short sentence."
)

TOOL_DESCRIPTION = (
    "Run a shell command in the workspace (the current directory) and return its exit "
    "code and output."
)

#: The worked examples the agents show the model before the task, as OpenAI-style chat
#: messages: a depth-1 task (the prompt says what to write) and a depth-2 one (the check
#: says it), on services and settings no generated task uses.
SHOTS: list[dict[str, Any]] = [
    {
        "role": "user",
        "content": "The ledger service's check fails: settings/shards must hold 12. Fix it "
        "so that `sh check.sh` passes.",
    },
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "call_1", "command": "echo 12 > settings/shards"}],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "exit code 0"},
    {"role": "assistant", "content": "Done: settings/shards holds 12."},
    {
        "role": "user",
        "content": "The printer service's check fails. Run `sh check.sh` to see why, then "
        "fix the file it names so that the check passes.",
    },
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "call_2", "command": "sh check.sh"}],
    },
    {
        "role": "tool",
        "tool_call_id": "call_2",
        "content": "exit code 1\nFAIL: etc/paper holds 'letter'; it must hold a4",
    },
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "call_3", "command": "echo a4 > etc/paper"}],
    },
    {"role": "tool", "tool_call_id": "call_3", "content": "exit code 0"},
    {"role": "assistant", "content": "Done: etc/paper holds a4."},
]

SERVICES = (
    "billing", "search", "mailer", "auth", "cache", "queue", "reports", "gateway",
    "payments", "uploads", "metrics", "scheduler", "inventory", "profile", "chat", "orders",
)
DIRECTORIES = ("config", "conf", "settings", "etc")
NOTE_DIRECTORIES = ("notes", "docs", "ops")
WORDS = {
    "level": ("debug", "info", "warn", "error"),
    "mode": ("fast", "safe", "strict", "lazy", "eager"),
    "region": ("north", "south", "east", "west", "central"),
    "color": ("red", "green", "blue", "amber", "violet"),
    "codec": ("gzip", "zstd", "brotli", "lz4"),
}
NUMBERS = {
    "port": (1024, 65000),
    "workers": (2, 64),
    "timeout": (5, 300),
    "retries": (1, 9),
    "threads": (2, 32),
    "limit": (100, 9999),
}
#: setting files of the same service that are already right (distractors)
OTHER_SETTINGS = 2

PROMPT_GIVEN = (
    "The {service} service's check fails: {place} must hold {value}. Fix it so that "
    "`sh check.sh` passes."
)
PROMPT_FIND = (
    "The {service} service's check fails. Run `sh check.sh` to see why, then fix the file "
    "it names so that the check passes."
)


@dataclass(frozen=True)
class Task:
    """One generated workspace and what solves it.

    :param place: the setting file that must change (relative to the workspace).
    :param value: the value it must hold.
    :param note: depth 3 only: the file where the value is written down.
    :param files: every file of the workspace, path → content.
    """

    seed: int
    depth: int
    service: str
    key: str
    place: str
    value: str
    wrong: str
    note: str | None
    prompt: str
    files: dict[str, str] = field(default_factory=dict)

    @property
    def split(self) -> str:
        """The evaluation split this task belongs to."""
        return f"depth-{self.depth}"


def make_task(seed: int, depth: int) -> Task:
    """The task of ``seed`` at ``depth`` (1, 2 or 3); the same arguments give the same task.

    :raises ValueError: ``depth`` is not 1, 2 or 3.
    """
    if depth not in (1, 2, 3):
        raise ValueError(f"depth={depth!r}: a repair task has depth 1, 2 or 3")
    rng = random.Random(f"repair:{seed}:{depth}")
    service = rng.choice(SERVICES)
    keys = rng.sample(sorted([*NUMBERS, *WORDS]), 1 + OTHER_SETTINGS)
    directory = rng.choice(DIRECTORIES)
    values = {k: _value(rng, k) for k in keys}
    key = keys[0]
    value = values[key]
    wrong = _value(rng, key, avoid=value)
    place = f"{directory}/{key}"
    note = f"{rng.choice(NOTE_DIRECTORIES)}/{key}.txt" if depth == 3 else None
    files = {f"{directory}/{k}": f"{v}\n" for k, v in values.items()}
    files[place] = f"{wrong}\n"
    if note is not None:
        files[note] = f"{value}\n"
    files["README"] = (
        f"The {service} service.\nIts settings live in {directory}/, one value per file.\n"
        "Run `sh check.sh` to check them.\n"
    )
    files["check.sh"] = _check_script(place, value, note)
    template = PROMPT_GIVEN if depth == 1 else PROMPT_FIND
    prompt = template.format(service=service, place=place, value=value)
    return Task(seed, depth, service, key, place, value, wrong, note, prompt, files)


def _value(rng: random.Random, key: str, avoid: str | None = None) -> str:
    while True:
        if key in WORDS:
            value = rng.choice(WORDS[key])
        else:
            low, high = NUMBERS[key]
            value = str(rng.randint(low, high))
        if value != avoid:
            return value


def _check_script(place: str, value: str, note: str | None) -> str:
    """The workspace's ``check.sh``: what a developer would run, and what the agent reads."""
    want = f"$(cat {note} 2>/dev/null)" if note else value
    told = f"the value in {note}" if note else value
    return (
        "#!/bin/sh\n"
        f"# Checks the service's settings.\n"
        f"want={want}\n"
        f"got=$(cat {place} 2>/dev/null)\n"
        'if [ -n "$want" ] && [ "$got" = "$want" ]; then\n'
        f'  echo "PASS: {place} is $got"\n'
        "  exit 0\n"
        "fi\n"
        f"echo \"FAIL: {place} holds '$got'; it must hold {told}\"\n"
        "exit 1\n"
    )


def check_command(task: Task) -> str:
    """The shell command that scores an episode: exit code 0 when the setting holds the
    task's value. It does not trust anything in the workspace but the setting file."""
    return (
        f'test "$(cat {shlex.quote(task.place)} 2>/dev/null)" = {shlex.quote(task.value)} '
        f"&& echo 'PASS: {task.place} is {task.value}' "
        f"|| {{ echo \"FAIL: {task.place} holds '$(cat {shlex.quote(task.place)} 2>/dev/null)'"
        f'; it must hold {task.value}"; exit 1; }}'
    )


def format_result(exit_code: int, output: str, *, limit: int = 600) -> str:
    """What the shell tool returns to the model: the exit code, then the output (cut)."""
    text = output.strip()
    if len(text) > limit:
        text = text[:limit] + " [...]"
    return f"exit code {exit_code}" + (f"\n{text}" if text else "")


def dataset_rows(seeds: range, depths: tuple[int, ...]) -> list[dict[str, Any]]:
    """Dataset lines: every seed at every depth, interleaved by seed."""
    return [
        {"id": f"repair-d{d}-{s:05d}", "seed": s, "depth": d, "split": f"depth-{d}"}
        for s in seeds
        for d in depths
    ]


def _write(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    sets = {
        # training: 140 tasks, depth 2 twice as often as depth 1, depth 3 half as often (the
        # untrained policy never solves it, so its groups rarely carry signal)
        "train.jsonl": dataset_rows(range(0, 40), (1, 2)) + dataset_rows(range(40, 80), (2,))
        + dataset_rows(range(80, 100), (3,)),
        # held out: unseen seeds, 50 per depth
        "heldout.jsonl": dataset_rows(range(100_000, 100_050), (1, 2, 3)),
        # the short CI form and quick looks
        "smoke.jsonl": dataset_rows(range(90_000, 90_004), (1, 2)),
    }
    for name, rows in sets.items():
        (directory / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
        print(f"{directory / name}: {len(rows)} tasks")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", type=Path, help="write the datasets into this directory")
    parser.add_argument("--show", type=int, help="print the task of this seed")
    parser.add_argument("--depth", type=int, default=2)
    args = parser.parse_args()
    if args.write:
        _write(args.write)
    if args.show is not None:
        task = make_task(args.show, args.depth)
        print(task.prompt, "\n")
        for path, content in sorted(task.files.items()):
            print(f"--- {path}\n{content}")
        print(f"--- reward check\n{check_command(task)}")


if __name__ == "__main__":
    main()
