"""Keep glibc's malloc from holding on to freed tensor memory.

torch allocates CPU tensors with malloc. glibc maps large blocks on their own and returns
them when freed, but it raises that threshold to the size of each mapped block freed (up
to 32 MiB), so after a model load most weight- and activation-sized blocks come from its
arenas, one per thread that allocates (the engine's, the trainer's, the event loop's), and
freed ones stay resident. In the main job (engine, trainer and gateway in one process)
that retained about 0.8 GB. A fixed threshold of 256 KiB (which also stops the raising)
and two arenas return it; mapping and unmapping a block costs a few page faults, small
beside the work done on it.

Blocks under the threshold (tensor metadata, small tensors, the interpreter's objects)
still come from the arenas, and their free space grows in holes between live blocks (43 →
179 MB over 4 steps of the main job), which trimming the top of a heap never returns.
:func:`release_free_memory` hands those pages back (``malloc_trim(0)``, ~10 ms; 40-170 MB
at the end of a main-job step); the engine calls it when its batch empties, the trainer
after each step.

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
MMAP_THRESHOLD = 256 * 1024
TRIM_THRESHOLD = 1024 * 1024
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
