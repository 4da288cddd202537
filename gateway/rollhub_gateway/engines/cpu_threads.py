"""How many threads the CPU's torch work gets, per kind of work.

torch's intra-op pool defaults to every core, and each thread that runs torch work keeps
its own count. The embedded engine shares its process with the gateway's event loop
(HTTP, chat templates, tool-call parsing) and its machine with the agents: when its
decoding steps take every core, those preempt one of its threads and each step waits for
the slowest. On the main job (two cores) the engine's forward passes took ~19 s of a step
with two threads and ~16 s with one (a decoding step of 1-4 rows 123 against 98 ms, of 32
rows 224 against 195 ms). An on-policy trainer runs between sampling phases and takes every
core; with ``max_staleness > 0`` it trains while the engine samples, and ``[trainer]
threads`` (e.g. one less) keeps the two off each other's cores.
"""

from __future__ import annotations

import os

__all__ = ["engine_threads", "set_thread_count", "usable_cores"]


def usable_cores() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def engine_threads(configured: int | None) -> int:
    """The engine's intra-op threads: ``configured``, else every core but one (at least
    one), which the gateway's event loop and the agents keep."""
    return configured or max(1, usable_cores() - 1)


def set_thread_count(threads: int) -> None:
    """Give the calling thread's torch operations ``threads`` intra-op threads, whatever
    other threads set later."""
    import torch

    torch.get_num_threads()  # torch's first-use setup of this thread: before, not after
    torch.set_num_threads(threads)
