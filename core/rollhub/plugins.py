"""Plugin discovery and the plugin manager.

Built-in behaviour is ordinary plugins named in :data:`DEFAULT_PLUGINS`. Installed plugins
are entry points in the ``rollhub`` group, each loaded on its own with stevedore: a plugin
that fails to import becomes a :class:`~rollhub.errors.PluginLoadError` record (listed by
``rollhub plugins``) and never hides the others. A user's own plugin can also be registered
in code (:meth:`PluginHost.register`) or from config (``[plugins] modules = ["pkg.mod"]``).

Order: the built-ins are registered first, then installed plugins in entry-point name
order, then ``[plugins] modules`` in the order listed, then plugins registered in code.
pluggy calls implementations in reverse registration order (the last registered first),
after any marked ``tryfirst`` and before any marked ``trylast``. For a firstresult hook
that means the plugin registered last answers; two plugins competing for one (neither
marked) get a warning, and ``rollhub plugins`` shows which answers.

Switches:

- ``ROLLHUB_DISABLE_PLUGINS``: comma-separated entry-point names not to load.
- ``ROLLHUB_TRACE_HOOKS=1``: log every hook call and result at DEBUG.
- ``ROLLHUB_PLUGIN_MODULES``: comma-separated ``pkg.mod`` plugins that :func:`default_host`
  loads besides the entry points (``rollhub run`` sets it from ``[plugins] modules`` so the
  agent workers it starts see the same plugins as the hub).
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pluggy

from rollhub import hookspecs
from rollhub.errors import PluginError, PluginLoadError
from rollhub.plugin_host.entry_point_distribution import (
    ENTRY_POINT_GROUP as ENTRY_POINT_GROUP,  # re-exported: it lived here
)
from rollhub.plugin_host.entry_point_distribution import distribution_of
from rollhub.plugin_host.markers import PROJECT_NAME
from rollhub.registry import ComponentRegistry
from rollhub.stores.base import BUILTIN_SCHEMES

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

    from stevedore import ExtensionManager

log = logging.getLogger(__name__)


#: Core modules that implement the default behaviour of every hook, registered first.
DEFAULT_PLUGINS: tuple[str, ...] = (
    "rollhub.builtin.components",
    "rollhub.builtin.stores",
    "rollhub.builtin.runtimes",
    "rollhub.builtin.pipeline",
    "rollhub.builtin.policies",
    "rollhub.judge.plugin",
    "rollhub.compat.plugin",
)


@dataclass
class PluginRecord:
    """One plugin known to the host: a loaded module or a load failure."""

    name: str
    module: str
    distribution: str | None = None
    version: str | None = None
    source: str = "entry point"  # "builtin", "entry point", "config", "code"
    error: PluginLoadError | None = None
    components: list[str] = field(default_factory=list)


class PluginHost:
    """The pluggy manager, the component registry and the list of plugins, together."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager(PROJECT_NAME)
        self.pm.add_hookspecs(hookspecs)
        self.registry = ComponentRegistry()
        self.plugins: dict[str, PluginRecord] = {}
        if os.environ.get("ROLLHUB_TRACE_HOOKS"):
            self.pm.trace.root.setwriter(lambda msg: log.debug("hook: %s", msg.rstrip()))
            self.pm.enable_tracing()
        self._historic_done = False

    @property
    def hook(self) -> pluggy.HookRelay:
        """The pluggy hook relay (``host.hook.rollhub_…(**kwargs)``)."""
        return self.pm.hook

    # Loading ------------------------------------------------------------------------------

    def load_default_plugins(self) -> None:
        """Register the core's built-in plugins."""
        for modname in DEFAULT_PLUGINS:
            self.register(importlib.import_module(modname), name=modname, source="builtin")

    def load_entry_points(self, *, disabled: Iterable[str] | None = None) -> None:
        """Load every installed plugin of the ``rollhub`` entry-point group, one by one."""
        from importlib import metadata

        from stevedore import NamedExtensionManager

        if disabled is None:
            disabled = _env_list("ROLLHUB_DISABLE_PLUGINS")
        skip = set(disabled)

        def on_failure(
            _manager: ExtensionManager[object], ep: EntryPoint, exc: BaseException, stage: str = "load"
        ) -> None:
            dist, version = distribution_of(ep)
            err = PluginLoadError(
                f"plugin {ep.name!r} ({ep.value}, from {dist or 'unknown distribution'}) "
                f"failed to {stage}: {type(exc).__name__}: {exc}",
                plugin=ep.name,
                distribution=dist,
                error=f"{type(exc).__name__}: {exc}",
            )
            log.warning("%s", err)
            log.debug("plugin %s %s traceback", ep.name, stage, exc_info=exc)
            self.plugins[ep.name] = PluginRecord(
                ep.name, ep.value, dist, version, "entry point", error=err
            )
            self.registry.load_failures[ep.name] = err

        # Disabled plugins must not even be imported, so they are left out by name.
        names = sorted({ep.name for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)})
        for name in sorted(skip & set(names)):
            log.info("plugin %s disabled by ROLLHUB_DISABLE_PLUGINS", name)
        mgr: NamedExtensionManager[object] = NamedExtensionManager(
            namespace=ENTRY_POINT_GROUP,
            names=[n for n in names if n not in skip],
            invoke_on_load=False,
            on_load_failure_callback=on_failure,
            name_order=True,
        )
        for ext in mgr.extensions:
            dist, version = distribution_of(ext.entry_point)
            try:
                self.register(
                    ext.plugin,
                    name=ext.name,
                    source="entry point",
                    distribution=dist,
                    version=version,
                )
            except Exception as exc:  # a plugin that breaks while registering is contained too
                on_failure(mgr, ext.entry_point, exc, stage="register")

    def load_modules(
        self, modules: Iterable[str], *, source: str = "config", search_dir: str | None = None
    ) -> None:
        """Import and register plugins given as dotted module paths (``pkg.mod``).

        :param search_dir: a directory tried first for the imports (the config file's), so a
            plugin module beside ``rollhub.toml`` needs no packaging and no ``PYTHONPATH``.
        """
        import sys

        if search_dir and search_dir not in sys.path:
            sys.path.insert(0, search_dir)
        for modname in modules:
            try:
                module = importlib.import_module(modname)
            except Exception as exc:
                raise PluginLoadError(
                    f"plugin module {modname!r} (plugins.modules) could not be imported: "
                    f"{type(exc).__name__}: {exc}; check the module path and that its "
                    f"package is installed",
                    plugin=modname,
                    distribution=None,
                    error=str(exc),
                ) from exc
            self.register(module, name=modname, source=source)

    def register(
        self,
        plugin: ModuleType | object,
        *,
        name: str | None = None,
        source: str = "code",
        distribution: str | None = None,
        version: str | None = None,
    ) -> str:
        """Register one plugin (a module or object of ``@hookimpl`` functions).

        Its ``rollhub_register_components`` runs at once (the hook is historic), with the
        components attributed to this plugin.
        """
        name = name or getattr(plugin, "__name__", None) or repr(plugin)
        if self.pm.is_registered(plugin) or self.pm.has_plugin(name):
            return name
        record = PluginRecord(
            name, getattr(plugin, "__name__", type(plugin).__name__), distribution, version, source
        )
        self.plugins[name] = record
        snapshot = self.registry.snapshot()
        try:
            with self.registry.attributed_to(name, distribution, version, source=source):
                self._register_hooks(plugin, name)
        except Exception:
            # leave no half-registered plugin behind: its hooks and components go
            if self.pm.has_plugin(name):
                self.pm.unregister(name=name)
            self.registry.restore(snapshot)
            del self.plugins[name]
            raise
        record.components = [f"{c.kind}:{c.name}" for c in self.registry.added_since(snapshot)]
        return name

    def _register_hooks(self, plugin: ModuleType | object, name: str) -> None:
        """pluggy registration; the first plugin also starts the historic hooks."""
        try:
            self.pm.register(plugin, name=name)
        except pluggy.PluginValidationError as exc:
            raise PluginError(f"plugin {name!r} is invalid: {exc}", plugin=name) from exc
        self._check_no_async_firstresult(name)
        if not self._historic_done:
            self.pm.hook.rollhub_addhooks.call_historic(kwargs={"pluginmanager": self.pm})
            self.pm.hook.rollhub_register_components.call_historic(
                kwargs={"registry": self.registry}
            )
            self._historic_done = True

    def _check_no_async_firstresult(self, name: str) -> None:
        """An ``async def`` firstresult implementation always wins with a coroutine (never
        None), so it could never decline: refuse it at registration."""
        plugin = self.pm.get_plugin(name)
        for caller in self.pm.get_hookcallers(plugin) or []:
            if not (caller.spec and caller.spec.opts.get("firstresult")):
                continue
            for impl in caller.get_hookimpls():
                if impl.plugin_name == name and inspect.iscoroutinefunction(impl.function):
                    raise PluginError(
                        f"plugin {name!r}: {caller.name} is a firstresult hook and cannot be "
                        f"'async def' (a coroutine is never None, so it could never decline); "
                        f"write a plain 'def' that returns an awaitable, or None to decline",
                        plugin=name,
                    )

    def competing(self) -> list[tuple[str, list[str]]]:
        """Firstresult hooks that several plugins implement: ``(hook, plugins)``, the plugin
        that answers first. Built-in defaults (``trylast``) are left out."""
        out = []
        for hook_name in sorted(h for h in dir(self.pm.hook) if h.startswith("rollhub_")):
            caller = getattr(self.pm.hook, hook_name)
            if not (caller.spec and caller.spec.opts.get("firstresult")):
                continue
            # get_hookimpls() is in reverse call order
            impls = [
                i
                for i in reversed(caller.get_hookimpls())
                if not i.hookwrapper and not i.wrapper and self._source(i.plugin_name) != "builtin"
            ]
            if len(impls) > 1:
                out.append((hook_name, [i.plugin_name for i in impls]))
        return out

    def warn_competition(self) -> None:
        """Warn when two plugins compete for a firstresult hook without saying which goes
        first (``tryfirst``/``trylast``): only one of them will ever answer."""
        for hook_name, plugins in self.competing():
            caller = getattr(self.pm.hook, hook_name)
            ordered = {i.plugin_name for i in caller.get_hookimpls() if i.tryfirst or i.trylast}
            if len(set(plugins) - ordered) > 1:
                log.warning(
                    "plugins %s all implement %s, which only one can answer: %r answers first "
                    "(registered last); mark the intended one @hookimpl(tryfirst=True) or "
                    "disable the others",
                    ", ".join(map(repr, plugins)),
                    hook_name,
                    plugins[0],
                )

    def _source(self, plugin_name: str) -> str:
        rec = self.plugins.get(plugin_name)
        return rec.source if rec else "code"

    def hooks_of(self, plugin_name: str) -> list[str]:
        """The ``rollhub_`` hooks a plugin implements (registration hooks left out)."""
        plugin = self.pm.get_plugin(plugin_name)
        if plugin is None:
            return []
        skip = {"rollhub_register_components", "rollhub_addhooks"}
        return sorted(c.name for c in self.pm.get_hookcallers(plugin) or [] if c.name not in skip)

    def check_pending(self) -> None:
        """Raise when a plugin implements a ``rollhub_`` hook that no spec declares."""
        try:
            self.pm.check_pending()
        except pluggy.PluginValidationError as exc:
            raise PluginError(str(exc)) from exc

    def failures(self) -> list[PluginLoadError]:
        """Load failures of installed plugins."""
        return [r.error for r in self.plugins.values() if r.error is not None]


def build_host(
    *,
    entry_points: bool = True,
    modules: Iterable[str] = (),
    plugins: Iterable[ModuleType | object] = (),
    search_dir: str | os.PathLike[str] | None = None,
) -> PluginHost:
    """A :class:`PluginHost` with the built-ins, installed plugins and the given extras.

    :param search_dir: where ``modules`` are looked for first (the config file's directory).
    """
    host = PluginHost()
    host.load_default_plugins()
    if entry_points:
        host.load_entry_points()
    host.load_modules(modules, search_dir=str(search_dir) if search_dir else None)
    for plugin in plugins:
        host.register(plugin)
    host.check_pending()
    host.warn_competition()
    return host


_DEFAULT_HOST: PluginHost | None = None


def default_host() -> PluginHost:
    """The process-wide host of installed plugins, built on first use.

    What a component that was given no registry resolves names through (an agent worker's
    stores), so that it sees the same plugins as the hub: the built-ins, every entry point
    and the modules in ``ROLLHUB_PLUGIN_MODULES``.
    """
    global _DEFAULT_HOST
    if _DEFAULT_HOST is None:
        _DEFAULT_HOST = build_host(modules=_env_list("ROLLHUB_PLUGIN_MODULES"))
    return _DEFAULT_HOST


class DiscoveryRegistry:
    """A registry view for processes that were given none (agent workers).

    The core's own stores resolve at once; any other name loads :func:`default_host` (every
    installed plugin, ~1 s) on first use. A plugin cannot take a built-in store's scheme
    (two components with one name are refused), so the shortcut answers as the host would.
    """

    def get(self, kind: str, name: str, *, field: str | None = None) -> type[Any]:
        """The class registered as ``kind`` ``name`` (see :meth:`ComponentRegistry.get`)."""
        if kind == "store" and name in BUILTIN_SCHEMES:
            modname, clsname = BUILTIN_SCHEMES[name].split(":")
            return getattr(importlib.import_module(modname), clsname)
        return default_host().registry.get(kind, name, field=field)


def default_registry() -> DiscoveryRegistry:
    """What a component given no registry resolves names through (see
    :class:`DiscoveryRegistry`)."""
    return DiscoveryRegistry()


def _env_list(var: str) -> list[str]:
    return [p.strip() for p in os.environ.get(var, "").split(",") if p.strip()]
