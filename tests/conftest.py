"""Suite-wide test settings. Area fixtures live in tests/<area>/conftest.py.

``bootstrap.py test`` runs the suite on parallel pytest-xdist workers (``-n``). Each test
directory (an *area*) runs whole on one worker: its session fixtures (a loaded model, a
started S3 server, a built environment) are made once, as in a serial run, and tests that
count the processes or threads of their area never see another area's. Areas with a test
marked ``slow`` are handed out first, so the quick ones fill the end of the run.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _area(nodeid: str) -> str:
    """The directory of a test id (``tests/core/a2a/test_x.py::test_y`` → ``tests/core/a2a``)."""
    return nodeid.split("::", 1)[0].rpartition("/")[0]


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Hand out whole areas, in collection order."""
    from xdist.scheduler import LoadScopeScheduling

    class AreaScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _area(nodeid)

    config.option.loadscopereorder = False
    return AreaScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On xdist workers, areas with a slow test first (each worker sorts the same way)."""
    if not hasattr(config, "workerinput"):
        return
    heavy = {_area(item.nodeid) for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: _area(item.nodeid) not in heavy)
