"""The suite's parallel run (``bootstrap.py test`` passes ``-n``): each test directory runs
whole on one worker, so its session fixtures are made once. pytest-xdist's own
``--dist loadgroup`` does nothing under pytest 9.2, hence the scheduler in
``tests/conftest.py``; this runs it on a small suite of its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

TEST = '''
import json, os, pathlib

def test_{n}():
    with pathlib.Path({log!r}).open("a") as fh:
        fh.write(json.dumps(["{area}", os.environ.get("PYTEST_XDIST_WORKER")]) + "\\n")
'''


def test_each_directory_runs_on_one_worker(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pytester.makeconftest((Path(__file__).parent / "conftest.py").read_text())
    log = tmp_path / "ran.jsonl"
    for area in ("alpha", "beta", "gamma"):
        for f in range(2):
            body = "\n".join(
                TEST.format(n=f"{f}_{i}", log=str(log), area=area) for i in range(3)
            )
            pytester.makepyfile(**{f"{area}/test_{area}_{f}": body})
    pytester.makepyfile(**{"alpha/test_slow_mark": "import pytest\n\n@pytest.mark.slow\ndef test_s():\n    pass\n"})
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow\n")
    result = pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=19)
    rows = [json.loads(x) for x in log.read_text().splitlines()]
    workers: dict[str, set[str]] = {}
    for area, worker in rows:
        workers.setdefault(area, set()).add(worker)
    assert len(rows) == 18
    assert all(len(w) == 1 for w in workers.values()), workers
    assert len(set().union(*workers.values())) == 2  # both workers were used
