"""Child processes that never outlive their parent.

:func:`die_with_parent` is called first thing in a child process (a local agent worker, a
gateway replica): on Linux the kernel sends the child SIGKILL when the parent's thread that
started it exits (``prctl(PR_SET_PDEATHSIG)``); a parent that died before that took effect
is caught at once; and, where asked, a watchdog thread exits when the parent pid changes
(platforms without ``prctl``).
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import threading
import time

__all__ = ["die_with_parent"]

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
#: seconds between the watchdog's looks at the parent pid
WATCH_INTERVAL_S = 0.5


def die_with_parent(parent_pid: int, *, watchdog: bool = True) -> None:
    """Make this process exit when ``parent_pid`` (its parent) exits.

    :param parent_pid: the parent's pid, as the parent passed it or ``os.getppid()`` read at
        start; if the current parent is another process already, this process exits now.
    :param watchdog: also poll the parent pid from a daemon thread; a caller that learns of
        its parent's death another way (its stdin reaching EOF) passes False.
    """
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            log.debug("prctl(PR_SET_PDEATHSIG) unavailable; relying on the watchdog or stdin")
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)
    if watchdog:
        threading.Thread(
            target=_watch, args=(parent_pid,), name="parent-watchdog", daemon=True
        ).start()


def _watch(parent_pid: int) -> None:
    while True:
        time.sleep(WATCH_INTERVAL_S)
        if os.getppid() != parent_pid:
            os._exit(1)
