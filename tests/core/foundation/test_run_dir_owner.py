"""A run directory has one run and one process at a time.

Found as a user who reran a command: ``rollhub run`` on a directory that already holds a run
was refused, but only after it had written its own config, config copy and manifest over the
first run's, so the directory described a run it does not hold (and ``--resume`` would go on
with the refused config). And nothing kept a second ``rollhub run --resume`` (a scheduler's
retry, a second terminal) off a run that is still going: both wrote its metrics and
checkpoints.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rollhub.errors import UsageError
from rollhub.runs.run_dir import RunDir

from tests.core.training.test_run_command import _rollhub, _setup

ROLLHUB = Path(sys.executable).with_name("rollhub")


def test_a_refused_second_run_leaves_the_first_runs_files_as_they_were(tmp_path: Path) -> None:
    cfg = _setup(tmp_path, 4)
    run = tmp_path / "run"
    first = subprocess.run([str(ROLLHUB), "run", str(cfg), "--run-dir", str(run)], cwd=tmp_path,
                           capture_output=True, text=True, timeout=240)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    kept = {name: (run / name).read_bytes() for name in
            (RunDir.CONFIG, RunDir.CONFIG_COPY, RunDir.MANIFEST, RunDir.ORIGIN, RunDir.METRICS)}
    cfg.write_text(cfg.read_text().replace('name = "train-cli"', 'name = "another"'))
    again = subprocess.run([str(ROLLHUB), "run", str(cfg), "--run-dir", str(run)], cwd=tmp_path,
                           capture_output=True, text=True, timeout=240)
    assert again.returncode == 2
    assert f"{run} already holds a run" in again.stderr and "--resume" in again.stderr
    for name, content in kept.items():
        assert (run / name).read_bytes() == content, f"{name} was rewritten by the refused run"


def test_a_second_process_is_refused_a_run_that_is_still_going(tmp_path: Path) -> None:
    cfg = _setup(tmp_path, 60)  # 30 steps of 0.4 s of training at least
    run = tmp_path / "run"
    proc = _rollhub("run", str(cfg), "--run-dir", str(run), cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        while not (run / RunDir.METRICS).exists():  # it has trained a step
            assert time.monotonic() < deadline and proc.poll() is None, proc.stdout.read()
            time.sleep(0.05)
        manifest = (run / RunDir.MANIFEST).read_bytes()
        second = subprocess.run([str(ROLLHUB), "run", "--resume", str(run)], cwd=tmp_path,
                                capture_output=True, text=True, timeout=120)
        running = proc.poll() is None
        assert second.returncode == 2, second.stdout[-2000:] + second.stderr[-2000:]
        assert f"{run} is in use by another rollhub process (pid {proc.pid})" in second.stderr
        assert running, "the first run ended before the second was refused: the test proves nothing"
        assert (run / RunDir.MANIFEST).read_bytes() == manifest  # no resumption recorded
        out, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out[-3000:]
    rows = [json.loads(x) for x in (run / RunDir.METRICS).read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(30))
    # the run is over: its directory is free again
    resumed = subprocess.run([str(ROLLHUB), "run", "--resume", str(run)], cwd=tmp_path,
                             capture_output=True, text=True, timeout=240)
    assert "in use" not in resumed.stderr, resumed.stderr[-2000:]


def _claim_in_a_child(run: Path) -> subprocess.CompletedProcess[str]:
    code = ("import sys; from rollhub.runs.run_dir import RunDir; "
            "RunDir(sys.argv[1]).claim(); print('claimed')")
    return subprocess.run([sys.executable, "-c", code, str(run)], capture_output=True,
                          text=True, timeout=60)


def test_a_claim_made_in_process_is_let_go_when_the_command_ends(tmp_path: Path) -> None:
    from rollhub.runs.run_dir import release_claims

    layout = RunDir(tmp_path)
    layout.claim()
    layout.claim()  # the same process again: still its own
    refused = _claim_in_a_child(tmp_path)
    assert refused.returncode != 0 and f"(pid {os.getpid()})" in refused.stderr
    release_claims()
    assert _claim_in_a_child(tmp_path).stdout.strip() == "claimed"


def test_a_lock_file_planted_as_a_link_is_refused_and_its_target_kept(tmp_path: Path) -> None:
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    run = tmp_path / "run"
    run.mkdir()
    (run / RunDir.LOCK).symlink_to(target)
    with pytest.raises(UsageError, match="remove it"):
        RunDir(run).claim()
    assert target.read_text() == "keep me"
