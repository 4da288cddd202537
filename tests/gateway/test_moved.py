"""The old paths of moved gateway modules: the same module, one warning naming the new path."""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import warnings

import pytest
import rollhub_gateway
from rollhub_gateway._moved import MOVED


def _forget(name: str) -> None:
    """Make the next import of ``name`` reach the finder again."""
    sys.modules.pop(name, None)
    parent, _, child = name.rpartition(".")
    if child in vars(sys.modules[parent]):
        delattr(sys.modules[parent], child)


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_is_the_new_module_and_warns_once_naming_it(old):
    new = MOVED[old]
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


def test_from_an_old_path_import_a_name():
    from rollhub_gateway.http.serving import ThreadedGateway as new

    _forget("rollhub_gateway.serving")
    with pytest.warns(DeprecationWarning, match=r"rollhub_gateway\.http\.serving"):
        from rollhub_gateway.serving import ThreadedGateway
    assert ThreadedGateway is new
    assert ThreadedGateway.__module__ == "rollhub_gateway.http.serving"


def test_the_warning_points_at_the_importing_line():
    _forget("rollhub_gateway.turn_plan")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import rollhub_gateway.turn_plan  # noqa: F401
    assert [w.filename for w in caught] == [__file__]


def test_old_paths_import_in_a_fresh_process_without_the_new_one_imported_first():
    code = (
        "import warnings\n"
        "warnings.simplefilter('error', DeprecationWarning)\n"
        "try:\n"
        "    import rollhub_gateway.fast_path\n"
        "except DeprecationWarning as w:\n"
        "    print(w)\n"
        "warnings.simplefilter('ignore', DeprecationWarning)\n"
        "import rollhub_gateway.policy_routes as old, rollhub_gateway.policies.routes as new\n"
        "print(old is new)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    ).stdout.splitlines()
    assert out == [
        "rollhub_gateway.fast_path has moved to rollhub_gateway.http.fast_path; import it from there",
        "True",
    ]


def test_no_old_path_is_a_file_and_every_new_path_is():
    root = rollhub_gateway.__path__[0]
    for old, new in MOVED.items():
        assert importlib.util.find_spec(new) is not None
        assert importlib.machinery.PathFinder.find_spec(old, [root]) is None
