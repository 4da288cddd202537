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


def test_a_run_whose_stdout_is_closed_still_trains_every_step(tmp_path: Path) -> None:
    cfg = _setup(tmp_path, 4)  # 2 steps of 2 groups
    run = tmp_path / "run"
    reader, writer = os.pipe()
    os.close(reader)  # the reader is gone before the first line: every write fails (EPIPE)
    exe = Path(sys.executable).with_name("rollhub")
    try:
        out = subprocess.run([str(exe), "run", str(cfg), "--run-dir", str(run)], cwd=tmp_path,
                             stdout=writer, stderr=subprocess.PIPE, text=True, timeout=240)
    finally:
        os.close(writer)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]
    assert (run / "checkpoints" / "latest").read_text() == "step-000002"
    # said once, on the console that is still there
    assert out.stderr.count("stdout was closed") == 1, out.stderr[-3000:]
    assert "Traceback" not in out.stderr


def test_a_run_whose_stdout_and_stderr_are_closed_still_trains_and_exits(tmp_path: Path) -> None:
    cfg = _setup(tmp_path, 4)
    run = tmp_path / "run"
    reader, writer = os.pipe()
    os.close(reader)
    exe = Path(sys.executable).with_name("rollhub")
    try:
        out = subprocess.run([str(exe), "run", str(cfg), "--run-dir", str(run)], cwd=tmp_path,
                             stdout=writer, stderr=writer, timeout=240)
    finally:
        os.close(writer)
    assert out.returncode == 0
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]


def test_an_evaluation_whose_stdout_is_closed_still_writes_its_report(tmp_path: Path) -> None:
    rows = [{"id": f"q{i}", "reward": i % 2} for i in range(4)]
    cfg = make_project(tmp_path, rows=rows, extra='[eval]\ndataset = "data.jsonl"\nn_samples = 2\n')
    report = tmp_path / "report.json"
    reader, writer = os.pipe()
    os.close(reader)
    exe = Path(sys.executable).with_name("rollhub")
    try:
        out = subprocess.run([str(exe), "eval", str(cfg), "--out", str(report)], cwd=tmp_path,
                             stdout=writer, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(writer)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(report.read_text())["samples"] == 8
    assert out.stderr.count("stdout was closed") == 1, out.stderr[-3000:]
