"""The old paths of modules that moved into subpackages, kept importable.

``import rollhub_gateway.serving`` (an old path) gives the module at its new path,
``rollhub_gateway.http.serving``: the same module object, so a name patched through either
path is patched for both. The first import of an old path warns with a
:class:`DeprecationWarning` that names the new path; later imports find the module in
``sys.modules`` and stay quiet.

One finder on ``sys.meta_path`` answers for every old path, so the package root holds no
file per moved module. ``rollhub_gateway/__init__.py`` installs it.
"""

from __future__ import annotations

import importlib
import importlib.abc
import sys
import warnings
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

__all__ = ["MOVED", "MovedModuleFinder", "install"]

#: old module path -> the path it moved to
MOVED: dict[str, str] = {
    "rollhub_gateway.app_server": "rollhub_gateway.http.app_server",
    "rollhub_gateway.conformance_report": "rollhub_gateway.conformance.report",
    "rollhub_gateway.conformance_script": "rollhub_gateway.conformance.script",
    "rollhub_gateway.conformance_templates": "rollhub_gateway.conformance.templates",
    "rollhub_gateway.fast_path": "rollhub_gateway.http.fast_path",
    "rollhub_gateway.http_head": "rollhub_gateway.http.request_head",
    "rollhub_gateway.journal_entries": "rollhub_gateway.journal.entries",
    "rollhub_gateway.policy_routes": "rollhub_gateway.policies.routes",
    "rollhub_gateway.policy_serving": "rollhub_gateway.policies.serving",
    "rollhub_gateway.render": "rollhub_gateway.chat_templates.render",
    "rollhub_gateway.serving": "rollhub_gateway.http.serving",
    "rollhub_gateway.template_env": "rollhub_gateway.chat_templates.environment",
    "rollhub_gateway.template_oracle": "rollhub_gateway.chat_templates.oracle",
    "rollhub_gateway.turn_nodes": "rollhub_gateway.trajectory.nodes",
    "rollhub_gateway.turn_plan": "rollhub_gateway.model_call.plan",
    "rollhub_gateway.turn_record": "rollhub_gateway.trajectory.record",
    "rollhub_gateway.turn_runner": "rollhub_gateway.model_call.runner",
}


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Finds the old path of a moved module; its loader hands out the module at the new path.

    :param moved: old module path -> new module path.
    """

    def __init__(self, moved: dict[str, str]) -> None:
        self.moved = moved

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        """A spec for an old path, else None (the regular finders look)."""
        new = self.moved.get(fullname)
        if new is None:
            return None
        return ModuleSpec(fullname, _MovedModuleLoader(new))


class _MovedModuleLoader(importlib.abc.Loader):
    """Loads an old path as the module at its new path, with the warning."""

    def __init__(self, new: str) -> None:
        self.new = new
        self._spec: ModuleSpec | None = None

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        # stacklevel 2 names the importing line: the warnings module skips the import
        # system's own frames between it and this one
        warnings.warn(
            f"{spec.name} has moved to {self.new}; import it from there",
            DeprecationWarning,
            stacklevel=2,
        )
        module = importlib.import_module(self.new)
        self._spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run (the module was imported under its new path), but put back the
        module's own spec, which the import system replaced with the old path's; its
        ``__name__`` and ``__loader__`` it keeps."""
        module.__spec__ = self._spec


def install() -> None:
    """Put the finder of :data:`MOVED` on ``sys.meta_path`` (once; later calls do nothing)."""
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(MovedModuleFinder(MOVED))
