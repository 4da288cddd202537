"""Fixtures of the reliability suite: real worker pools on loopback, bounded runs.

The helpers the tests share (``make_runtime``, ``pid_alive``, ``LONG``) are in
:mod:`tests.reliability.local_pools`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rollhub.stores.file import FileResultStore


@pytest.fixture
def store(tmp_path: Path) -> FileResultStore:
    return FileResultStore(tmp_path / "results", fsync=False)
