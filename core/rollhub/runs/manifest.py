"""What produced a run: the code (git commit and whether the checkout was dirty), the
versions of rollhub, its plugins and the libraries that shape the numbers, the resolved
config, the command line and the machine. ``rollhub run`` writes it as ``manifest.json``
in every run directory, ``rollhub eval`` into every report, and ``rollhub view`` shows it.
"""

from __future__ import annotations

import importlib.metadata as md
import logging
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rollhub.config import RollhubConfig

__all__ = ["MANIFEST_VERSION", "build_manifest", "git_state", "machine", "versions"]

log = logging.getLogger(__name__)

MANIFEST_VERSION = 1

#: libraries whose version changes sampled tokens, gradients or the agents' requests
LIBRARIES = (
    "torch", "transformers", "tokenizers", "accelerate", "numpy", "trl", "tinker", "ray",
    "openai", "anthropic", "strands-agents", "langgraph", "langchain-openai", "pydantic",
)


def git_state(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """``{"commit", "dirty", "root"}`` of the git checkout holding ``path``, or None when it
    is not in one (an installed wheel) or git is missing. ``dirty``: tracked files differ
    from the commit."""
    where = Path(path)
    where = where if where.is_dir() else where.parent

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=where, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()

    try:
        root = git("rev-parse", "--show-toplevel")
        commit = git("rev-parse", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError) as exc:
        log.debug("no git checkout at %s: %s", where, exc)
        return None
    return {"commit": commit, "dirty": bool(changed), "root": root}


def versions() -> dict[str, str]:
    """Installed versions of rollhub, of every distribution that provides rollhub plugins,
    and of the libraries in :data:`LIBRARIES`."""
    found: dict[str, str] = {"python": platform.python_version()}
    names = {"rollhub"}
    for dist in md.distributions():
        if any(ep.group == "rollhub" for ep in dist.entry_points):
            names.add(dist.metadata["Name"])
    for name in sorted(names) + list(LIBRARIES):
        try:
            found[name] = md.version(name)
        except md.PackageNotFoundError:
            continue
    return found


def machine() -> dict[str, Any]:
    """Cores (usable by this process and in all), memory and the platform."""
    usable: int | None
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count()
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        memory = None
    return {
        "platform": platform.platform(),
        "processor": platform.machine(),
        "cpus": os.cpu_count(),
        "cpus_usable": usable,
        "memory_bytes": memory,
        "hostname": platform.node(),
    }


def build_manifest(
    cfg: RollhubConfig, *, config_file: str | os.PathLike[str] | None = None,
    argv: list[str] | None = None,
) -> dict[str, Any]:
    """The manifest of a run (or an evaluation) about to start with ``cfg``."""
    import rollhub

    code = git_state(Path(rollhub.__file__).parent)
    project = git_state(config_file) if config_file else None
    return {
        "manifest_version": MANIFEST_VERSION,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": list(sys.argv if argv is None else argv),
        "cwd": os.getcwd(),
        "config_file": str(Path(config_file).resolve()) if config_file else None,
        "seed": cfg.experiment.seed,
        "git": code,
        # the config's own checkout, when it is another repository than rollhub's
        "project_git": project if project and project != code else None,
        "versions": versions(),
        "machine": machine(),
        "config": cfg.to_toml_dict(),
    }
