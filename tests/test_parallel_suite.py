"""The suite's parallel run (``bootstrap.py test`` passes ``-n``): each test directory runs
whole on one worker, so its session fixtures are made once. pytest-xdist's own
``--dist loadgroup`` does nothing under pytest 9.2, hence the scheduler in
``tests/conftest.py``; this runs it on a small suite of its own, in a pytest process of its
own (an in-process ``pytester`` run would restore ``sys.modules`` under the tests that
follow it on this worker)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]

TEST = '''
import json, os, pathlib

def test_{n}():
    with pathlib.Path({log!r}).open("a") as fh:
        fh.write(json.dumps(["{area}", os.environ.get("PYTEST_XDIST_WORKER"),
                            os.environ.get("OMP_WAIT_POLICY")]) + "\\n")
'''


def _bootstrap() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bootstrap_under_test", ROOT / "bootstrap.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _small_suite(tmp_path: Path) -> tuple[Path, Path]:
    """Three areas of six tests each, under a copy of the suite's conftest; and their log."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text())
    (suite / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: slow\n")
    log = tmp_path / "ran.jsonl"
    for area in ("alpha", "beta", "gamma"):
        (suite / area).mkdir()
        for f in range(2):
            body = "\n".join(TEST.format(n=f"{f}_{i}", log=str(log), area=area) for i in range(3))
            (suite / area / f"test_{area}_{f}.py").write_text(body)
    return suite, log


def _pytest(suite: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "XDIST_")) and k != "OMP_WAIT_POLICY"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=suite, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_each_directory_runs_whole_on_one_worker(tmp_path: Path) -> None:
    suite, log = _small_suite(tmp_path)
    done = _pytest(suite, "-n", "2")
    rows = [json.loads(x) for x in log.read_text().splitlines()]
    workers: dict[str, set[str]] = {}
    assert {policy for _, _, policy in rows} == {"PASSIVE"}  # idle OpenMP threads sleep
    for area, worker, _ in rows:
        workers.setdefault(area, set()).add(worker)
    assert len(rows) == 18
    assert all(len(w) == 1 for w in workers.values()), workers
    assert len(set().union(*workers.values())) == 2  # both workers were used
    # the run ends with where its time went: every area, and both workers' totals
    summary = done.stdout.split("slowest areas", 1)[1]
    assert all(f"s {area}\n" in summary for area in ("alpha", "beta", "gamma")), summary
    assert "busy: gw0 " in summary and ", gw1 " in summary, summary


def test_areas_go_out_longest_first_by_the_seconds_a_run_recorded(tmp_path: Path) -> None:
    suite, log = _small_suite(tmp_path)
    (suite / "area_seconds.json").write_text(json.dumps({"beta": 20.0, "gamma": 30.0}))
    _pytest(suite, "-n", "1", "--record-area-seconds")
    ran = [json.loads(x)[0] for x in log.read_text().splitlines()]
    assert list(dict.fromkeys(ran)) == ["gamma", "beta", "alpha"]  # alpha: not known yet
    # the run wrote what it measured for each area (its six tests take milliseconds)
    recorded = json.loads((suite / "area_seconds.json").read_text())
    assert set(recorded) == {"alpha", "beta", "gamma"}
    assert all(0 <= seconds < 5 for seconds in recorded.values()), recorded


def test_the_suite_runs_on_a_worker_per_core_unless_the_caller_chose(monkeypatch) -> None:
    workers = _bootstrap()._workers
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.setenv("ROLLHUB_TEST_WORKERS", "3")
    assert workers(["tests/core"]) == ["-n", "3"]
    monkeypatch.setenv("ROLLHUB_TEST_WORKERS", "1")
    assert workers([]) == []
    monkeypatch.setenv("ROLLHUB_TEST_WORKERS", "4")
    for chosen in (["-n", "0"], ["-n=2"], ["--numprocesses", "2"], ["--dist", "load"],
                   ["-p", "no:xdist"], ["-pno:xdist"]):
        assert workers(["-x", *chosen]) == [], chosen
