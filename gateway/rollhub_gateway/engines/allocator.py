"""Keep glibc's malloc from holding on to freed tensor memory.

torch allocates CPU tensors with malloc. glibc maps large blocks on their own and returns
them when freed, but it raises that threshold to the size of each mapped block freed (up
to 32 MiB), so after a model load most weight- and activation-sized blocks come from its
arenas, one per thread that allocates (the engine's, the trainer's, the event loop's), and
freed ones stay resident. In the main job (engine, trainer and gateway in one process)
that retained about 0.8 GB. A fixed threshold of 256 KiB (which also stops the raising)
and two arenas return it; mapping and unmapping a block costs a few page faults, small
beside the work done on it.

``ROLLHUB_MALLOC_TUNING=0`` leaves the allocator as it is.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys

__all__ = ["tune_allocator"]

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
MMAP_THRESHOLD = 256 * 1024
TRIM_THRESHOLD = 1024 * 1024
ARENAS = 2

_done = False


def tune_allocator() -> bool:
    """Set glibc's malloc thresholds for this process (once); False where not glibc or
    turned off."""
    global _done
    if _done:
        return True
    if not sys.platform.startswith("linux") or os.environ.get("ROLLHUB_MALLOC_TUNING") == "0":
        return False
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others have no mallopt
        return False
    ok = all(
        mallopt(option, value)
        for option, value in (
            (M_MMAP_THRESHOLD, MMAP_THRESHOLD),
            (M_TRIM_THRESHOLD, TRIM_THRESHOLD),
            (M_ARENA_MAX, ARENAS),
        )
    )
    _done = ok
    log.debug("malloc tuning %s", "set" if ok else "refused")
    return ok
