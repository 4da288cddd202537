"""The old paths of moved modules, the core's and the gateway's: the same module, one warning
naming the new path."""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import warnings

import pytest
import rollhub
import rollhub_gateway
from rollhub import moved_modules
from rollhub_gateway import _moved as gateway_moved

#: package -> its table of old path -> new path
TABLES = {rollhub: moved_modules.MOVED, rollhub_gateway: gateway_moved.MOVED}
PAIRS = sorted((old, new) for table in TABLES.values() for old, new in table.items())


def _forget(name: str) -> None:
    """Make the next import of ``name`` reach the finder again."""
    sys.modules.pop(name, None)
    parent, _, child = name.rpartition(".")
    if child in vars(sys.modules[parent]):
        delattr(sys.modules[parent], child)


def test_both_packages_have_moved_modules() -> None:
    assert len(moved_modules.MOVED) >= 30 and len(gateway_moved.MOVED) >= 17


@pytest.mark.parametrize(("old", "new"), PAIRS)
def test_an_old_path_is_the_new_module_and_warns_once_naming_it(old: str, new: str) -> None:
    module = importlib.import_module(new)
    _forget(old)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert importlib.import_module(old) is module
        assert importlib.import_module(old) is module  # cached: no second warning
    deprecations = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert len(deprecations) == 1
    assert new in str(deprecations[0].message) and old in str(deprecations[0].message)
    # the module is unchanged under its own path
    assert module.__name__ == new and module.__spec__.name == new
    assert sys.modules[new] is module


@pytest.mark.parametrize(
    ("old", "new", "name"),
    [
        ("rollhub.hub", "rollhub.hubs.async_hub", "AsyncHub"),
        ("rollhub_gateway.serving", "rollhub_gateway.http.serving", "ThreadedGateway"),
    ],
)
def test_from_an_old_path_import_a_name(old: str, new: str, name: str) -> None:
    expected = getattr(importlib.import_module(new), name)
    _forget(old)
    with pytest.warns(DeprecationWarning, match=new.replace(".", r"\.")):
        module = importlib.import_module(old)
    assert getattr(module, name) is expected
    assert expected.__module__ == new


def test_the_warning_points_at_the_importing_line() -> None:
    _forget("rollhub_gateway.turn_plan")
    _forget("rollhub.retry")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import rollhub.retry  # noqa: F401
        import rollhub_gateway.turn_plan  # noqa: F401
    assert [w.filename for w in caught] == [__file__, __file__]


def test_old_paths_import_in_a_fresh_process_without_the_new_one_imported_first() -> None:
    code = (
        "import warnings\n"
        "warnings.simplefilter('error', DeprecationWarning)\n"
        "for old in ('rollhub.session_watch', 'rollhub_gateway.fast_path'):\n"
        "    try:\n"
        "        __import__(old)\n"
        "    except DeprecationWarning as w:\n"
        "        print(w)\n"
        "warnings.simplefilter('ignore', DeprecationWarning)\n"
        "import rollhub.hub_sync as old, rollhub.hubs.sync_hub as new\n"
        "import rollhub_gateway.policy_routes as gw_old, rollhub_gateway.policies.routes as gw_new\n"
        "print(old is new, gw_old is gw_new)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    ).stdout.splitlines()
    assert out == [
        "rollhub.session_watch has moved to rollhub.submission.session_watch; import it from there",
        "rollhub_gateway.fast_path has moved to rollhub_gateway.http.fast_path; import it from there",
        "True True",
    ]


@pytest.mark.parametrize("package", list(TABLES), ids=lambda p: p.__name__)
def test_no_old_path_is_a_file_and_every_new_path_is(package) -> None:
    root = package.__path__[0]
    for old, new in TABLES[package].items():
        assert importlib.util.find_spec(new) is not None
        assert importlib.machinery.PathFinder.find_spec(old.rpartition(".")[2], [root]) is None
