"""The processes below a pid, as the local Ray cluster finds a node's raylet and workers."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

from rollhub.testing.process_tree import command_name, descendants


def test_the_processes_below_a_shell_and_their_names():
    # a shell that starts a sleep in the background and waits for it: shell -> sleep
    shell = subprocess.Popen(["sh", "-c", "sleep 30 & wait"])
    below: list[int] = []
    names: list[str] = []
    try:
        # the child is a copy of the shell, named sh, until it has exec'd sleep
        deadline = time.monotonic() + 10
        while names != ["sleep"] and time.monotonic() < deadline:
            time.sleep(0.02)
            below = descendants(shell.pid)
            names = [command_name(pid) for pid in below]
        assert names == ["sleep"]
        assert shell.pid not in below and descendants(below[0]) == []
        assert command_name(shell.pid) == "sh"
    finally:
        for pid in below:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shell.kill()
        shell.wait()
    # a process gone has no name
    assert command_name(shell.pid) == ""
