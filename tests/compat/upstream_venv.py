"""The virtual environment that holds agentcore-rl-toolkit 0.1.4 for the cross tests.

0.1.4 and 0.2.0 cannot share one environment (and 0.1.4 drags in the starter toolkit), so
0.1.4 lives in ``.venvs/agentcore-rl/`` at the repository root, built from the pinned
``agentcore-rl-0.1.4.txt`` and reused while that file's content hash is unchanged.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import subprocess
import sys
import time
from pathlib import Path

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venvs" / "agentcore-rl"
REQUIREMENTS = Path(__file__).with_name("agentcore-rl-0.1.4.txt")
STAMP = VENV / ".requirements.sha256"


def upstream_python() -> Path:
    """The 0.1.4 environment's interpreter, building the environment when it is stale."""
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    python = VENV / "bin" / "python"
    if python.exists() and STAMP.exists() and STAMP.read_text().strip() == digest:
        return python
    started = time.monotonic()
    shutil.rmtree(VENV, ignore_errors=True)
    base = Path(sys.base_prefix) / "bin" / "python3"
    subprocess.run([str(base), "-m", "venv", str(VENV)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-deps", "-r", str(REQUIREMENTS)],
        check=True,
    )
    STAMP.write_text(digest + "\n")
    log.warning("built %s in %.0f s", VENV, time.monotonic() - started)
    return python
