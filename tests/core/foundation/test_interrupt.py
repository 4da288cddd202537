"""Ctrl-C during ``rollhub run``: a prompt exit (130) that says where the run's files are and
how to go on, and no worker left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from tests.core.training.test_run_command import _rollhub, _setup


def test_ctrl_c_says_where_the_run_is_and_how_to_resume_it(tmp_path):
    cfg = _setup(tmp_path, 10)  # 5 steps of 2 groups, 0.4 s of training each
    run = tmp_path / "run"
    # as from a terminal: SIGINT handled (a test worker may ignore it, and children inherit
    # an ignored signal)
    proc = _rollhub("run", str(cfg), "--run-dir", str(run), cwd=tmp_path,
                    preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    started = run / "manifest.json"  # before its first checkpoint: it resumes from step 0
    deadline = time.monotonic() + 180
    while not started.exists():
        assert time.monotonic() < deadline and proc.poll() is None, proc.stdout.read()
        time.sleep(0.05)
    assert not (run / "checkpoints").exists()
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends: the whole group
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    assert "rollhub: interrupted" in out
    assert f"run directory: {run}" in out and f"rollhub run --resume {run}" in out, out
    assert "Traceback" not in out and "exited with code" not in out, out
    time.sleep(0.5)
    # this run's workers only (other tests may serve the same agent meanwhile)
    ps = subprocess.run(["pgrep", "-f", "--", f"--parent-pid {proc.pid}"],
                        capture_output=True, text=True)  # fmt: skip
    assert ps.returncode == 1 and ps.stdout.strip() == "", ps  # 1: matched no process


def test_sigterm_stops_the_run_as_ctrl_c_does_and_exits_143(tmp_path):
    # what a scheduler (Slurm, Kubernetes) sends the command it started before it kills it
    cfg = _setup(tmp_path, 10)
    run = tmp_path / "run"
    proc = _rollhub("run", str(cfg), "--run-dir", str(run), cwd=tmp_path,
                    preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    started = run / "manifest.json"
    deadline = time.monotonic() + 180
    while not started.exists():
        assert time.monotonic() < deadline and proc.poll() is None, proc.stdout.read()
        time.sleep(0.05)
    time.sleep(1.0)  # its workers are up
    proc.send_signal(signal.SIGTERM)  # the process alone, as `kill PID` does
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 143, out
    assert "rollhub: terminated (SIGTERM)" in out
    assert f"run directory: {run}" in out and f"rollhub run --resume {run}" in out, out
    assert "Traceback" not in out, out
    time.sleep(0.5)
    ps = subprocess.run(["pgrep", "-f", "--", f"--parent-pid {proc.pid}"],
                        capture_output=True, text=True)  # fmt: skip
    assert ps.returncode == 1 and ps.stdout.strip() == "", ps


def test_sigterm_ends_a_command_even_where_ctrl_c_is_ignored(tmp_path):
    # a process started in the background by a shell ignores SIGINT; SIGTERM must still work
    cfg = _setup(tmp_path, 10)
    run = tmp_path / "run"
    proc = _rollhub("run", str(cfg), "--run-dir", str(run), cwd=tmp_path,
                    preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    deadline = time.monotonic() + 180
    while not (run / "manifest.json").exists():
        assert time.monotonic() < deadline and proc.poll() is None, proc.stdout.read()
        time.sleep(0.05)
    time.sleep(1.0)  # its workers are up
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 143, out
    assert "rollhub: terminated (SIGTERM)" in out and f"rollhub run --resume {run}" in out, out
    assert "Traceback" not in out and "exception" not in out.lower(), out
    time.sleep(0.5)
    ps = subprocess.run(["pgrep", "-f", "--", f"--parent-pid {proc.pid}"],
                        capture_output=True, text=True)  # fmt: skip
    assert ps.returncode == 1 and ps.stdout.strip() == "", ps


def test_a_command_run_in_process_leaves_sigterm_as_it_found_it(tmp_path, capsys):
    from rollhub.cli import main

    from tests.core.foundation.project import make_project

    def mine(signum, frame):  # a handler of the test's own, as a notebook or server might set
        raise AssertionError("not called")

    before = signal.signal(signal.SIGTERM, mine)
    try:
        assert main(["config", "check", str(make_project(tmp_path))]) == 0
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, before)
