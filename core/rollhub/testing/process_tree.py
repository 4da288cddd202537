"""The processes below a pid and their names, read from ``/proc`` (Linux).

:mod:`rollhub.testing.ray_cluster` signals only the processes it started: a node's
``ray start`` and whatever runs below it (its raylet, the workers), found here.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["command_name", "descendants"]


def command_name(pid: int) -> str:
    """The process's command name (``/proc/PID/comm``); empty when it is gone."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def descendants(root: int) -> list[int]:
    """Every live process below ``root`` (zombies left out)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] == "Z":
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out
