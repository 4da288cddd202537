"""Suite-wide test settings. Area fixtures live in tests/<area>/conftest.py."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

_TESTS = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give every test its directory as its pytest-xdist group.

    ``bootstrap.py test`` runs the suite on parallel workers with ``--dist loadgroup``; a
    directory's tests then share one worker, so its session fixtures (a loaded model, a
    started S3 server, a built environment) are made once, as in a serial run, and tests
    that count the processes or threads of their area do not see another area's.
    """
    for item in items:
        group = item.path.parent.relative_to(_TESTS).as_posix()
        item.add_marker(pytest.mark.xdist_group(group or "tests"))
