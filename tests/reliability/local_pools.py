"""Local worker pools for the reliability suite: the runtime serving ``agents.py``, its size
switch and a liveness probe for the processes it starts.

``ROLLHUB_RELIABILITY_LONG=1`` turns on the longer variants (more rollouts, more kills);
the default sizes keep the whole suite within a few minutes of CI time.
"""

from __future__ import annotations

import os
from pathlib import Path

from rollhub.runtimes.local import LocalRuntime

AGENTS = str(Path(__file__).with_name("agents.py"))
LONG = os.environ.get("ROLLHUB_RELIABILITY_LONG", "") not in ("", "0")


def make_runtime(app: str = "noop", **options) -> LocalRuntime:
    """A local runtime (not started) serving ``agents.py:<app>``."""
    options = {"workers": 2, "ping_interval_s": 0.2, "startup_timeout_s": 30, **options}
    return LocalRuntime(app=f"{AGENTS}:{app}", **options)


def pid_alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
