"""The virtual environment that holds agentcore-rl-toolkit 0.1.4 for the cross tests.

0.1.4 and 0.2.0 cannot share one environment (and 0.1.4 drags in the starter toolkit), so
0.1.4 lives in an environment of its own, built from the pinned ``agentcore-rl-0.1.4.txt``
once per machine and shared by its checkouts while that file's content hash is unchanged
(``tests/dependency_envs.py``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from tests.dependency_envs import dependency_env, pip

REQUIREMENTS = Path(__file__).with_name("agentcore-rl-0.1.4.txt")


def _install(python: Path) -> None:
    # bytecode as modules are first imported: the tests import a fraction of them
    pip(python, "install", "--quiet", "--no-compile", "--no-deps", "-r", str(REQUIREMENTS),
        cwd=REQUIREMENTS.parent)


def upstream_python() -> Path:
    """The 0.1.4 environment's interpreter, building the environment when it is missing."""
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:16]
    return dependency_env("agentcore-rl", digest, _install) / "bin" / "python"
