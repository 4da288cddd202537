"""The check environment: one virtual environment built from ``bench/gpu/requirements-gpu.txt``.

Installing needs access to the package registry and takes several minutes (vLLM, torch with
CUDA, verl); it runs before the checks and does not count against their time budget.
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["REQUIREMENTS", "install_commands", "venv_python"]

REQUIREMENTS = Path(__file__).resolve().parent.parent / "requirements-gpu.txt"


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def install_commands(venv: Path, *, python: str = sys.executable) -> list[list[str]]:
    """The commands that build or update ``venv``, as argv lists, run from the repository root
    (the requirements file's ``-e ./...`` paths are relative to it)."""
    py = str(venv_python(venv))
    pip = [py, "-m", "pip", "--disable-pip-version-check", "install"]
    commands = []
    if not venv_python(venv).exists():
        commands.append([python, "-m", "venv", str(venv)])
    commands.append([*pip, "--upgrade", "pip>=24"])
    commands.append([*pip, "-r", str(REQUIREMENTS)])
    return commands
