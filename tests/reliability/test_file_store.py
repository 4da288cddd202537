"""The file:// store under a writer killed mid-write, and with symbolic links planted in it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from rollhub.app import RolloutApp
from rollhub.errors import StoreError
from rollhub.stores.file import FileResultStore

from tests.reliability.local_pools import LONG, pid_alive

WRITER = textwrap.dedent(
    """
    import sys
    from rollhub.stores.file import FileResultStore
    store = FileResultStore(sys.argv[1])
    store.put("exp/in/s1.json", {"blob": "x" * (200 * 1024 * 1024)})
    """
)


def _kill_mid_write(root) -> None:
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(root)])
    try:
        deadline = time.monotonic() + 30
        tmp_dir = root / "exp" / "in"
        while time.monotonic() < deadline:
            if tmp_dir.is_dir() and any(p.name.startswith(".tmp-") for p in tmp_dir.iterdir()):
                break
            time.sleep(0.005)
        else:
            raise AssertionError("the writer never started its temporary file")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert not pid_alive(proc.pid)


def test_killed_writers_leave_no_visible_partial_and_temp_files_are_cleaned(tmp_path) -> None:
    root = tmp_path / "results"
    for _ in range(4 if LONG else 2):
        _kill_mid_write(root)
    store = FileResultStore(root)
    assert store.get("exp/in/s1.json") is None and store.list() == []
    leftovers = sorted((root / "exp" / "in").glob(".tmp-*"))
    assert leftovers
    old = time.time() - 3600
    for path in leftovers:
        os.utime(path, (old, old))
    live = root / "exp" / "in" / ".tmp-live-write.json"
    live.write_bytes(b"{")  # a write in progress: recent, must survive
    app = RolloutApp(allowed_stores=None)
    app.store_for(f"file://{root}")
    deadline = time.monotonic() + 10
    while any(p.exists() for p in leftovers) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not any(p.exists() for p in leftovers)
    assert live.exists()


@pytest.mark.parametrize("where", ["dir", "file"])
def test_writes_never_follow_a_symlink_inside_the_root(tmp_path, where) -> None:
    root, outside = tmp_path / "results", tmp_path / "outside"
    outside.mkdir()
    (root / "exp").mkdir(parents=True)
    if where == "dir":
        (root / "exp" / "in").symlink_to(outside, target_is_directory=True)
        key = "exp/in/s1.json"
    else:
        (root / "exp" / "in").mkdir()
        (root / "exp" / "in" / "s1.json").symlink_to(outside / "victim.json")
        key = "exp/in/s1.json"
    store = FileResultStore(root, fsync=False)
    with pytest.raises(StoreError, match="symbolic link"):
        store.put(key, {"rewards": 1.0})
    assert list(outside.iterdir()) == []
