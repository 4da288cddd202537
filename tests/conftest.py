"""Suite-wide test settings. Area fixtures live in tests/<area>/conftest.py.

``bootstrap.py test`` runs the suite on parallel pytest-xdist workers (``-n``). Each test
directory (an *area*) runs whole on one worker: its session fixtures (a loaded model, a
started S3 server, a built environment) are made once, as in a serial run, and tests that
count the processes or threads of their area never see another area's. Areas are handed
out longest first, by the seconds a whole run measured (``area_seconds.json``, rewritten by
``pytest --record-area-seconds``), so the quick ones fill the end of the run and the
workers finish together; an area not in that file counts as a minute if it has a test
marked ``slow``, else as nothing. The run ends with what each area and each worker spent,
to show where the suite's time goes.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Two workers on two cores each run torch with a thread per core. Idle OpenMP threads that
# spin for work take the core from the other worker's threads; sleeping ones do not. On
# the two heaviest areas (tests/plugins/trl and tests/core/training, two workers) the busy
# time went from 454 and 458 s to 419 and 414 s. Set before any test imports torch; the
# processes the tests start inherit it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


AREA_SECONDS = Path(__file__).with_name("area_seconds.json")
#: the guess for an area with a slow test that AREA_SECONDS does not know yet
SLOW_AREA_SECONDS = 60.0

# seconds of setup, call and teardown, summed on the controller (or the only process)
_AREA_SECONDS: defaultdict[str, float] = defaultdict(float)
_WORKER_SECONDS: defaultdict[str, float] = defaultdict(float)


def _area(nodeid: str) -> str:
    """The directory of a test id (``tests/core/a2a/test_x.py::test_y`` → ``tests/core/a2a``)."""
    return nodeid.split("::", 1)[0].rpartition("/")[0]


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Hand out whole areas, in the order the workers sorted them (longest first)."""
    from xdist.scheduler import LoadScopeScheduling

    class AreaScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _area(nodeid)

    config.option.loadscopereorder = False
    return AreaScheduling(config, log)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-area-seconds", action="store_true",
        help=f"write each area's measured seconds into {AREA_SECONDS.name} (the order in which "
        "parallel workers get the areas)",
    )


def _known_seconds() -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(AREA_SECONDS.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On xdist workers, the longest areas first (each worker sorts the same way)."""
    if not hasattr(config, "workerinput"):
        return
    known = _known_seconds()
    heavy = {_area(item.nodeid) for item in items if item.get_closest_marker("slow")}
    guess = {a: known.get(a, SLOW_AREA_SECONDS if a in heavy else 0.0) for a in
             {_area(item.nodeid) for item in items}}
    items.sort(key=lambda item: -guess[_area(item.nodeid)])


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _AREA_SECONDS[_area(report.nodeid)] += report.duration
    worker = getattr(getattr(report, "node", None), "gateway", None)
    _WORKER_SECONDS[getattr(worker, "id", "main")] += report.duration


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Where the run's time went: the slowest areas, then each worker's total."""
    if hasattr(config, "workerinput") or not _AREA_SECONDS:
        return
    terminalreporter.write_sep("=", "slowest areas (setup + call + teardown)")
    ranked = sorted(_AREA_SECONDS.items(), key=lambda kv: kv[1], reverse=True)
    for area, seconds in ranked[:20]:
        terminalreporter.write_line(f"{seconds:9.1f}s {area}")
    if config.getoption("record_area_seconds"):
        measured = {a: round(seconds, 1) for a, seconds in ranked}
        AREA_SECONDS.write_text(json.dumps({**_known_seconds(), **measured}, indent=1,
                                           sort_keys=True) + "\n")
        terminalreporter.write_line(f"written to {AREA_SECONDS}")
    busy = ", ".join(f"{w} {s:.0f} s" for w, s in sorted(_WORKER_SECONDS.items()))
    terminalreporter.write_line(f"busy: {busy}; total {sum(_AREA_SECONDS.values()):.0f} s")

