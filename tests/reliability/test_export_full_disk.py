"""Exports on a full disk: no torn line for readers, and the error says why."""

from __future__ import annotations

import contextlib
import json
import resource
import signal
import subprocess
from pathlib import Path

import pytest
from rollhub.errors import ExportError
from rollhub.export import JsonlAppender, read_rows, write_rows


@contextlib.contextmanager
def _full_disk(path: Path, size: str = "64k"):
    """A small tmpfs at ``path`` when this process may mount one, else a file-size limit.

    Yields the errno text a write past the limit fails with.
    """
    path.mkdir()
    try:
        mounted = (
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                capture_output=True,
                check=False,
            ).returncode
            == 0
        )
    except OSError:  # no mount command here
        mounted = False
    if mounted:
        try:
            yield "No space left on device"
        finally:
            subprocess.run(["umount", "-l", str(path)], check=False)
        return
    # RLIMIT_FSIZE makes writes past 64 KiB fail with EFBIG (SIGXFSZ ignored) — the same
    # short write a full disk gives.
    old = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, old[1]))
    try:
        yield "File too large"
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old)
        signal.signal(signal.SIGXFSZ, handler)


def _row(i: int) -> dict:
    return {"schema_version": 1, "i": i, "blob": "y" * 1500}


def test_appender_never_leaves_a_torn_line(tmp_path) -> None:
    with _full_disk(tmp_path / "disk") as cause:
        out = tmp_path / "disk" / "episodes.jsonl"
        writer = JsonlAppender(out)
        written = 0
        with pytest.raises(ExportError) as info:
            for i in range(1000):
                writer.write(_row(i))
                written += 1
        assert cause in str(info.value) and str(out) in str(info.value)
        text = out.read_text()
        assert text.endswith("\n")
        rows = [json.loads(line) for line in text.splitlines()]
        assert [r["i"] for r in rows] == list(range(written))
        writer.close()


def test_write_rows_keeps_the_old_file_and_names_the_cause(tmp_path) -> None:
    with _full_disk(tmp_path / "disk") as cause:
        out = tmp_path / "disk" / "episodes.jsonl"
        write_rows([_row(0)], out)
        with pytest.raises(ExportError, match=cause):
            write_rows([_row(i) for i in range(200)], out)
        assert [r["i"] for r in read_rows(out)] == [0]
        assert not list((tmp_path / "disk").glob("*.tmp"))
