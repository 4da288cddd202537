"""SIGTERM ends a command as Ctrl-C does.

A scheduler (Slurm at preemption, Kubernetes at eviction) or ``kill PID`` stops a command
with SIGTERM, and kills it a grace period later. Python's default for SIGTERM ends the
process on the spot: no worker or sandbox stopped, no word of where the run is or how to go
on. :func:`sigterm_as_interrupt` turns the signal into the interrupt that Ctrl-C raises, so the
same clean stop runs (the runtime stops its workers, ``rollhub run`` says how to resume),
and :func:`sigterm_received` lets the command line exit with 143 instead of 130. A second
SIGTERM ends the process at once.

A command's event loop runs under :func:`run_command`. There SIGTERM cancels the command's
main task first, as asyncio's own Ctrl-C handling does, so its cleanup runs before the
remaining tasks are cancelled. That also holds where SIGINT is ignored (a command a script
started in the background), where asyncio installs no Ctrl-C handling of its own: an
interrupt raised inside the loop there stopped it mid-callback, and asyncio logged the
tracebacks of every task it then cancelled at once.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, TypeVar

__all__ = ["run_command", "sigterm_as_interrupt", "sigterm_received"]

T = TypeVar("T")

_received = False
#: the task of the coroutine :func:`run_command` runs, while it runs
_main_task: asyncio.Task[Any] | None = None


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


def run_command(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` for a command: SIGTERM cancels ``main``'s task (see the module
    docstring), and the cancellation comes out as the :class:`KeyboardInterrupt` Ctrl-C
    raises, so callers handle both one way."""

    async def registered() -> T:
        global _main_task
        _main_task = asyncio.current_task()
        try:
            return await main
        finally:
            _main_task = None

    try:
        return asyncio.run(registered())
    except asyncio.CancelledError:
        if _received:
            raise KeyboardInterrupt from None
        raise


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    global _received
    _received = True
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second one is not negotiated with
    task = _main_task
    if task is not None and not task.done():
        task.cancel()
        task.get_loop().call_soon_threadsafe(lambda: None)  # wake the loop from its select
        return
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # started in the background by a shell: Ctrl-C's own handling is off, so interrupt here
        raise KeyboardInterrupt
    # Ctrl-C's own path: inside asyncio.run, its handler cancels the command's task cleanly
    signal.raise_signal(signal.SIGINT)
