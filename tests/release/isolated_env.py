"""Running the release artifacts in isolation: the source tree's root and an environment in
which only one virtualenv provides Python packages."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def clean_env(venv_dir: Path, **extra: str) -> dict[str, str]:
    """An environment in which only ``venv_dir`` provides Python packages: no PYTHONPATH, no
    other virtualenv, the user's pip settings kept."""
    env = {k: v for k, v in os.environ.items() if k.startswith("PIP_")}
    env.update(
        PATH=f"{venv_dir / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        HOME=os.environ.get("HOME", "/root"),
        LANG="C.UTF-8",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        AWS_CONFIG_FILE="/nonexistent",
    )
    env.update(extra)
    return env
