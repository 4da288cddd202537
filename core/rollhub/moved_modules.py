"""Old paths of modules that moved into subpackages, kept importable.

``import rollhub.hub`` (an old path) gives the module at its new path,
``rollhub.hubs.async_hub``: the same module object, so a name patched through either path is
patched for both. The first import of an old path warns with a :class:`DeprecationWarning`
that names the new path; later imports find the module in ``sys.modules`` and stay quiet.

One finder on ``sys.meta_path`` answers for every old path of every package that registers
its moves with :func:`install` (the core here, ``rollhub_gateway`` for its own), so a
package root holds no file per moved module.
"""

from __future__ import annotations

import importlib
import importlib.abc
import sys
import warnings
from collections.abc import Mapping, Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

__all__ = ["MOVED", "MovedModuleFinder", "install"]

#: the core's old module paths -> the paths they moved to
MOVED: dict[str, str] = {
    "rollhub.attempts": "rollhub.hubs.attempts",
    "rollhub.callbacks": "rollhub.submission.callbacks",
    "rollhub.capture_sessions": "rollhub.hubs.capture_sessions",
    "rollhub.comparison": "rollhub.runs.comparison",
    "rollhub.components": "rollhub.plugin_host.components",
    "rollhub.entry_point_distribution": "rollhub.plugin_host.entry_point_distribution",
    "rollhub.episode_rewards": "rollhub.scoring.episode_rewards",
    "rollhub.evaluation": "rollhub.runs.evaluation",
    "rollhub.group_rewards": "rollhub.scoring.group_rewards",
    "rollhub.hook_calls": "rollhub.plugin_host.hook_calls",
    "rollhub.hosted_hub": "rollhub.hubs.hosted",
    "rollhub.hub": "rollhub.hubs.async_hub",
    "rollhub.hub_sync": "rollhub.hubs.sync_hub",
    "rollhub.hub_view": "rollhub.hubs.view",
    "rollhub.intervals": "rollhub.runs.intervals",
    "rollhub.loop_thread": "rollhub.lifetimes.loop_thread",
    "rollhub.manifest": "rollhub.runs.manifest",
    "rollhub.markers": "rollhub.plugin_host.markers",
    "rollhub.parent_death": "rollhub.lifetimes.parent_death",
    "rollhub.plugin_settings": "rollhub.plugin_host.settings",
    "rollhub.progress": "rollhub.submission.progress",
    "rollhub.ratelimit": "rollhub.submission.ratelimit",
    "rollhub.report": "rollhub.runs.report",
    "rollhub.retry": "rollhub.submission.retry",
    "rollhub.rewards": "rollhub.scoring.rewards",
    "rollhub.rollout_future": "rollhub.submission.future",
    "rollhub.run_dir": "rollhub.runs.run_dir",
    "rollhub.session_watch": "rollhub.submission.session_watch",
    "rollhub.staleness": "rollhub.hubs.staleness",
    "rollhub.unknown_component": "rollhub.plugin_host.unknown_component",
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


_FINDER = MovedModuleFinder({})


def install(moved: Mapping[str, str]) -> None:
    """Answer for the old paths in ``moved`` (old path -> new path) from now on.

    One finder serves every package's table; it goes on ``sys.meta_path`` the first time.
    """
    _FINDER.moved.update(moved)
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)
