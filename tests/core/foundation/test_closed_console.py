"""A long command whose console goes away (``rollhub run ... | head``, a closed terminal)
finishes its work: a closed stdout is not a reason to stop training, and an exit status
of 0 must mean the run ran."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.core.foundation.project import make_project
from tests.core.training.test_run_command import _setup

ROLLHUB = Path(sys.executable).with_name("rollhub")


def _with_a_closed_console(*args: str, cwd: Path, stderr_too: bool = False
                           ) -> subprocess.CompletedProcess[str]:
    """``rollhub ARGS`` with stdout (and stderr) a pipe whose reader is gone before the
    first line: every write fails with EPIPE."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        return subprocess.run([str(ROLLHUB), *args], cwd=cwd, stdout=writer, text=True,
                              stderr=writer if stderr_too else subprocess.PIPE, timeout=240)
    finally:
        os.close(writer)


def _steps(run: Path) -> list[int]:
    return [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()]


def test_a_run_whose_stdout_is_closed_still_trains_every_step(tmp_path: Path) -> None:
    cfg = _setup(tmp_path, 4)  # 2 steps of 2 groups
    run = tmp_path / "run"
    out = _with_a_closed_console("run", str(cfg), "--run-dir", str(run), cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert _steps(run) == [0, 1]
    assert (run / "checkpoints" / "latest").read_text() == "step-000002"
    # said once, on the console that is still there
    assert out.stderr.count("stdout was closed") == 1, out.stderr[-3000:]
    assert "Traceback" not in out.stderr


def test_a_run_whose_stdout_and_stderr_are_closed_still_trains_and_exits(tmp_path: Path) -> None:
    cfg = _setup(tmp_path, 4)
    run = tmp_path / "run"
    out = _with_a_closed_console("run", str(cfg), "--run-dir", str(run), cwd=tmp_path,
                                 stderr_too=True)
    assert out.returncode == 0
    assert _steps(run) == [0, 1]


def test_an_evaluation_whose_stdout_is_closed_still_writes_its_report(tmp_path: Path) -> None:
    rows = [{"id": f"q{i}", "reward": i % 2} for i in range(4)]
    cfg = make_project(tmp_path, rows=rows, extra='[eval]\ndataset = "data.jsonl"\nn_samples = 2\n')
    report = tmp_path / "report.json"
    out = _with_a_closed_console("eval", str(cfg), "--out", str(report), cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(report.read_text())["samples"] == 8
    assert out.stderr.count("stdout was closed") == 1, out.stderr[-3000:]
