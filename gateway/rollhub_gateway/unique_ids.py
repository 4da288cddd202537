"""Ids of responses, messages and tool calls: unique, not secret.

They name objects an agent echoes back; they grant nothing, so they need no fresh
cryptographic randomness each (``uuid4`` reads the OS's random source on every call, a
system call per id, several per turn). A process draws 48 random bits once and counts from
there; ids of different processes, forked ones included, differ in that prefix.
"""

from __future__ import annotations

import itertools
import os

__all__ = ["unique_id"]


def _reseed() -> None:
    global _PREFIX, _COUNT
    _PREFIX = os.urandom(6).hex()
    _COUNT = itertools.count()


_PREFIX = ""
_COUNT = itertools.count()
_reseed()
os.register_at_fork(after_in_child=_reseed)


def unique_id(prefix: str) -> str:
    """``prefix`` and 24 hex digits, unique across this machine's processes."""
    return f"{prefix}{_PREFIX}{next(_COUNT):012x}"
