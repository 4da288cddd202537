"""A replica (or agent worker) process dies with its parent: ``rollhub.lifetimes.parent_death``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

# the parent starts the child (telling it its pid: a child that starts late still knows
# whom it must outlive), prints the child's pid, then waits to be killed
PARENT = textwrap.dedent(
    """
    import os, subprocess, sys, time
    code = sys.argv[1].replace("PARENT_PID", str(os.getpid()))
    child = subprocess.Popen([sys.executable, "-c", code])
    print(child.pid, flush=True)
    time.sleep(60)
    """
)
CHILD = textwrap.dedent(
    """
    import os, time
    from rollhub.lifetimes.parent_death import die_with_parent
    die_with_parent(PARENT_PID, watchdog={watchdog})
    time.sleep(60)
    """
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie has exited
        return f.read().split(") ")[1][0] != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("watchdog", [True, False])
def test_the_child_exits_when_its_parent_is_killed(watchdog: bool) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, CHILD.format(watchdog=watchdog)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    time.sleep(0.5)  # the child has called die_with_parent
    assert _alive(child)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)
