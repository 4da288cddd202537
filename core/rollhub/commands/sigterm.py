"""SIGTERM ends a command as Ctrl-C does.

A scheduler (Slurm at preemption, Kubernetes at eviction) or ``kill PID`` stops a command
with SIGTERM, and kills it a grace period later. Python's default for SIGTERM ends the
process on the spot: no worker or sandbox stopped, no word of where the run is or how to go
on. :func:`handle_sigterm` turns the signal into the interrupt that Ctrl-C raises, so the
same clean stop runs (``asyncio.run`` cancels the command's task, the runtime stops its
workers, ``rollhub run`` says how to resume), and :func:`sigterm_received` lets the command
line exit with 143 instead of 130. A second SIGTERM ends the process at once.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

__all__ = ["handle_sigterm", "sigterm_received"]

_received = False


def sigterm_received() -> bool:
    """Whether this process was sent SIGTERM since :func:`handle_sigterm`."""
    return _received


def handle_sigterm() -> None:
    """From now on, SIGTERM interrupts the command as Ctrl-C would (main thread only)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_sigterm)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    global _received
    _received = True
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second one is not negotiated with
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # started in the background by a shell: Ctrl-C's own handling is off, so interrupt here
        raise KeyboardInterrupt
    # Ctrl-C's own path: inside asyncio.run, its handler cancels the command's task cleanly
    signal.raise_signal(signal.SIGINT)
