"""Keep glibc's malloc from holding on to freed tensor memory, without faulting in fresh
pages for every tensor a step allocates.

torch allocates CPU tensors with malloc. glibc maps large blocks on their own and returns
them when freed, but it raises that threshold to the size of each mapped block freed (up
to 32 MiB), and keeps one arena per thread that allocates (the engine's, the trainer's,
the event loop's): in the main job (engine, trainer and gateway in one process) freed
tensors kept about 0.8 GB resident. Two arenas and a fixed threshold (which also stops the
raising) bound that.

The threshold is 16 MiB, not smaller: every tensor a decoding step or a prefill chunk
allocates (activations, attention scores, 32 rows of logits, the draw's 12 MiB of
uniforms) is under it, so a freed one is reused by the next step from the arena. Mapped
anew, each such block costs its pages' faults every time: with a 256 KiB threshold the
engine took 19.2-19.8 s against 16.1-17.0 s for 32 sessions of the calculator workload
(the ``engine`` system of ``bench/bench_engine_floor.py``, runs interleaved), and the main
job 6 min 18 s against 5 min 34 s, its peak resident memory 2.05 against 2.17 GB.
The top of a heap is given back once 32 MiB of it is free.

Free space left inside the arenas (between live blocks, and the top below that bound) is
what :func:`release_free_memory` hands back (``malloc_trim(0)``, ~10 ms); the engine calls
it when its batch empties, the trainer after each step.

``ROLLHUB_MALLOC_TUNING=0`` leaves the allocator as it is.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys

__all__ = ["release_free_memory", "tune_allocator"]

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
MMAP_THRESHOLD = 16 * 1024 * 1024
TRIM_THRESHOLD = 32 * 1024 * 1024
ARENAS = 2

_done = False
_libc: ctypes.CDLL | None = None


def _glibc() -> ctypes.CDLL | None:
    """glibc, or None where this is another C library or the tuning is turned off."""
    global _libc
    if _libc is not None:
        return _libc
    if not sys.platform.startswith("linux") or os.environ.get("ROLLHUB_MALLOC_TUNING") == "0":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt, libc.malloc_trim  # noqa: B018 - musl and others have neither
    except (OSError, AttributeError):
        return None
    _libc = libc
    return libc


def tune_allocator() -> bool:
    """Set glibc's malloc thresholds for this process (once); False where not glibc or
    turned off."""
    global _done
    if _done:
        return True
    libc = _glibc()
    if libc is None:
        return False
    ok = all(
        libc.mallopt(option, value)
        for option, value in (
            (M_MMAP_THRESHOLD, MMAP_THRESHOLD),
            (M_TRIM_THRESHOLD, TRIM_THRESHOLD),
            (M_ARENA_MAX, ARENAS),
        )
    )
    _done = ok
    log.debug("malloc tuning %s", "set" if ok else "refused")
    return ok


def release_free_memory() -> bool:
    """Return the free pages inside malloc's arenas to the system; False where not glibc
    or turned off (``ROLLHUB_MALLOC_TUNING=0``)."""
    libc = _glibc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True
