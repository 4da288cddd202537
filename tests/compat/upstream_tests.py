"""Runs agentcore-rl-toolkit's own unit tests against ``rollhub.compat``.

Upstream's tests live in its repository, not in its sdist or wheel, so they are not part
of this suite; with a checkout of them::

    python -m tests.compat.upstream_tests PATH/TO/UPSTREAM/tests/runtime/test_app.py ...

An import hook makes ``agentcore_rl_toolkit`` and its submodules resolve to the
``rollhub.compat`` modules that hold the same names (:data:`HOMES`), then pytest runs the
given files. A submodule rollhub does not offer (Ray adapters, upstream's private A2A
client helpers) fails to import, naming itself, so the count says what is missing.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Sequence
from typing import Any

__all__ = ["HOMES", "install", "main"]

ROOT = "agentcore_rl_toolkit"
#: upstream module -> the rollhub.compat module with its public names
HOMES = {
    ROOT: "rollhub.compat",
    f"{ROOT}.app": "rollhub.compat.agentcore_rl",
    f"{ROOT}.runtime": "rollhub.compat",
    f"{ROOT}.runtime.app": "rollhub.compat.runtime_app",
    f"{ROOT}.runtime.client": "rollhub.compat.runtime_client",
    f"{ROOT}.runtime.protocol": "rollhub.compat.runtime_protocol",
    f"{ROOT}.runtime.store": "rollhub.compat.runtime_protocol",
    f"{ROOT}.rollout_session": "rollhub.compat",
    f"{ROOT}.rollout_session.wire": "rollhub.compat.session_wire",
    f"{ROOT}.rollout_session.errors": "rollhub.compat.session_wire",
    f"{ROOT}.rollout_session.exception_utils": "rollhub.compat.session_wire",
    f"{ROOT}.rollout_session.lifecycle": "rollhub.compat.session_bounds",
    f"{ROOT}.rollout_session.factory": "rollhub.compat.session_factory",
    f"{ROOT}.rollout_session.a2a_executor": "rollhub.compat.a2a_executor",
    f"{ROOT}.rollout_session.a2a_client": "rollhub.compat.a2a_sessions",
    f"{ROOT}.rollout_session.agentcore_a2a_session": "rollhub.compat.a2a_sessions",
    f"{ROOT}.rollout_session.docker_a2a_session": "rollhub.compat.a2a_sessions",
    f"{ROOT}.rollout_session.agentcore_s3_session": "rollhub.compat.s3_session",
    f"{ROOT}.rollout_session.agentcore_http_session": "rollhub.compat.http_session",
    f"{ROOT}.concurrency": "rollhub.compat",
    f"{ROOT}.concurrency.priority_semaphore": "rollhub.compat.session_bounds",
    f"{ROOT}.concurrency.priority_assigner": "rollhub.compat.session_bounds",
    f"{ROOT}.concurrency.rate_limiter": "rollhub.compat.session_bounds",
    f"{ROOT}.aws_tools": "rollhub.compat",
    f"{ROOT}.aws_tools.persistent_dict": "rollhub.compat.session_state",
}


class _Package(types.ModuleType):
    """An upstream package path: its own names come from its rollhub home."""

    def __init__(self, name: str, home: str) -> None:
        super().__init__(name)
        self.__path__: list[str] = []
        self._home = home

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self._home), attr)


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != ROOT and not name.startswith(ROOT + "."):
            return None
        if name not in HOMES:
            raise ImportError(f"rollhub.compat offers nothing for {name}", name=name)
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec: Any) -> types.ModuleType:
        name = spec.name
        home = HOMES[name]
        is_parent = any(other.startswith(name + ".") for other in HOMES)
        module: types.ModuleType = (
            _Package(name, home) if is_parent or home == "rollhub.compat" else _leaf(name, home)
        )
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        parent, _, child = module.__name__.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, module)


def _leaf(name: str, home: str) -> types.ModuleType:
    """The rollhub module itself, so patches of its attributes reach its code."""
    return importlib.import_module(home)


def install() -> None:
    """Make ``agentcore_rl_toolkit`` imports resolve to ``rollhub.compat`` (idempotent)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        for name in [n for n in sys.modules if n == ROOT or n.startswith(ROOT + ".")]:
            del sys.modules[name]
        sys.meta_path.insert(0, _Finder())


def main(argv: Sequence[str] | None = None) -> int:
    """Run pytest on upstream's test files with the import hook installed."""
    import pytest

    install()
    args = list(sys.argv[1:] if argv is None else argv)
    return int(pytest.main(["-c", "/dev/null", "-p", "no:cacheprovider", "-q", "-rf", *args]))


if __name__ == "__main__":
    raise SystemExit(main())
