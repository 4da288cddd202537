"""SIGTERM ends a command as Ctrl-C does.

A scheduler (Slurm at preemption, Kubernetes at eviction) or ``kill PID`` stops a command
with SIGTERM, and kills it a grace period later. Python's default for SIGTERM ends the
process on the spot: no worker or sandbox stopped, no word of where the run is or how to go
on. :func:`sigterm_as_interrupt` turns the signal into the interrupt that Ctrl-C raises, so the
same clean stop runs (``asyncio.run`` cancels the command's task, the runtime stops its
workers, ``rollhub run`` says how to resume), and :func:`sigterm_received` lets the command
line exit with 143 instead of 130. A second SIGTERM ends the process at once.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["sigterm_as_interrupt", "sigterm_received"]

_received = False


def sigterm_received() -> bool:
    """Whether this process was sent SIGTERM inside :func:`sigterm_as_interrupt`."""
    return _received


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Inside the block, SIGTERM interrupts the command as Ctrl-C would; the handler before
    it is back afterwards (a command run in-process, from a test or a notebook, leaves its
    process as it found it). Only the main thread can take signals: elsewhere, nothing."""
    global _received
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _received = False
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    global _received
    _received = True
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second one is not negotiated with
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # started in the background by a shell: Ctrl-C's own handling is off, so interrupt here
        raise KeyboardInterrupt
    # Ctrl-C's own path: inside asyncio.run, its handler cancels the command's task cleanly
    signal.raise_signal(signal.SIGINT)
