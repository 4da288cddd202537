"""The component registry: which runtimes, stores, token sources… exist, by config word.

Plugins fill it from their ``rollhub_register_components(registry)`` hook. Each component
class names itself with a ``name`` class attribute (the word users write in config) and may
carry a pydantic ``Options`` model that validates its config section.

The core's kinds are :data:`KINDS`; a plugin may declare more with
:meth:`ComponentRegistry.add_kind` (then register components of it with ``add(kind, cls)``).
An unknown name gets an install hint when some distribution is known to provide it:
:data:`KNOWN_DISTRIBUTIONS`, plus what plugins add with
:meth:`ComponentRegistry.add_install_hint`.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError

from rollhub.config import RollhubConfig
from rollhub.errors import ConfigError, PluginError, PluginLoadError, UnknownComponentError
from rollhub.plugin_host.unknown_component import (
    KNOWN_DISTRIBUTIONS as KNOWN_DISTRIBUTIONS,  # re-exported: it lived here
)
from rollhub.plugin_host.unknown_component import unknown_component_message
from rollhub.validation import explain, first_loc

log = logging.getLogger(__name__)

#: a component kind: one of :data:`KINDS` or one a plugin declared with ``add_kind``
ComponentKind = str

KINDS: tuple[ComponentKind, ...] = (
    "runtime",
    "store",
    "token_source",
    "sampling_backend",
    "trainer",
    "framework",
    "sandbox_provider",
    "metric_sink",
)

class ComponentLookup(Protocol):
    """Finds a component class by kind and config word (a registry, or a view of one)."""

    def get(self, kind: ComponentKind, name: str, *, field: str | None = None) -> type[Any]:
        """The class registered as ``kind`` ``name``; raises if there is none."""
        ...


@dataclass(frozen=True)
class ComponentContext:
    """What the core tells every component it builds, in one object.

    Constructor contract of every component kind: ``cls(options, *, context=context)``,
    where ``options`` is the validated ``Options`` model of the component's config section
    (omitted when the class has no ``Options``). Read what you need from the context; new
    fields may be added, none removed.

    :param base_dir: the config file's directory; relative paths in options are relative
        to it.
    :param run_dir: the run directory (trainers write their outputs here); None outside a
        run.
    :param exp_id: the experiment id, the result-store prefix.
    :param config: the whole validated config, or None (a component built from code).
    :param policy: the ``[[policies]]`` name a trainer is built for (one trainer per
        trainable policy), else None.
    """

    base_dir: Path = field(default_factory=Path.cwd)
    run_dir: Path | None = None
    exp_id: str = "rollhub"
    config: RollhubConfig | None = None
    policy: str | None = None

    def path(self, value: str | Path) -> Path:
        """``value`` resolved against :attr:`base_dir` (absolute paths unchanged)."""
        p = Path(value).expanduser()
        return p if p.is_absolute() else self.base_dir / p


#: keywords components received before :class:`ComponentContext`, by kind; a class that
#: does not take ``context`` still gets these (when its constructor names them or takes
#: ``**kwargs``), so plugins written for them keep working.
LEGACY_KEYWORDS: dict[str, tuple[str, ...]] = {
    "runtime": ("base_dir",),
    "token_source": ("base_dir",),
    "trainer": ("run_dir", "exp_id"),
}


@dataclass(frozen=True)
class ComponentInfo:
    """One registered component: its kind, config word, class and where it came from."""

    kind: ComponentKind
    name: str
    cls: type
    plugin: str
    distribution: str | None
    version: str | None
    source: str = "code"


class ComponentRegistry:
    """Components by kind and name. Filled by plugins, read by config and the hub."""

    def __init__(self) -> None:
        self._components: dict[ComponentKind, dict[str, ComponentInfo]] = {k: {} for k in KINDS}
        #: kind -> (description, plugin that declared it)
        self.kinds: dict[ComponentKind, tuple[str, str]] = {k: ("", "rollhub") for k in KINDS}
        self._current_plugin: tuple[str, str | None, str | None, str] = (
            "<code>",
            None,
            None,
            "code",
        )
        #: plugins that failed to load, by plugin name; consulted when a lookup misses.
        self.load_failures: dict[str, PluginLoadError] = {}
        #: install hints added by plugins, over :data:`KNOWN_DISTRIBUTIONS`
        self.install_hints: dict[tuple[str, str], str] = {}

    def add_kind(self, kind: str, description: str = "") -> None:
        """Declare a new component kind (``add(kind, cls)`` then registers components of it).

        Declaring a kind that exists is allowed when nothing differs (plugins may share one).
        """
        if not kind.isidentifier() or not kind.islower():
            raise PluginError(f"component kind {kind!r} must be a lowercase identifier")
        if kind not in self._components:
            self._components[kind] = {}
            self.kinds[kind] = (description, self._current_plugin[0])
            log.debug("component kind %r declared by %s", kind, self._current_plugin[0])

    def add_install_hint(self, kind: str, name: str, distribution: str) -> None:
        """Say that ``distribution`` (``pkg`` or ``pkg[extra]``) provides ``kind`` ``name``,
        so a config naming it without that installed gets the ``pip install`` to run."""
        self.install_hints[(kind, name)] = distribution

    # Registration -------------------------------------------------------------------------

    def add(self, kind: ComponentKind, cls: type) -> type:
        """Register ``cls`` as a component of ``kind`` under ``cls.name``.

        Returns the class, so this works as a decorator too. Registering a second class under
        a name already taken is a :class:`PluginError` naming both plugins.
        """
        if kind not in self._components:
            raise PluginError(
                f"unknown component kind {kind!r}; kinds: {', '.join(self._components)} "
                f"(a plugin declares a new kind with registry.add_kind({kind!r}) first)"
            )
        name = getattr(cls, "name", None)
        if not isinstance(name, str) or not name:
            raise PluginError(
                f"{cls.__module__}.{cls.__qualname__} has no 'name' class attribute; "
                f"set name = '<config word>' on the class"
            )
        plugin, dist, version, source = self._current_plugin
        existing = self._components[kind].get(name)
        if existing is not None and existing.cls is not cls:
            raise PluginError(
                f"two {kind} components are named {name!r}: {_qualname(existing.cls)} "
                f"(plugin {existing.plugin}) and {_qualname(cls)} (plugin {plugin}); "
                + _duplicate_fix(existing, plugin, source)
            )
        self._components[kind][name] = ComponentInfo(kind, name, cls, plugin, dist, version, source)
        log.debug("registered %s %r from %s", kind, name, plugin)
        return cls

    def add_runtime(self, cls: type) -> type:
        """Register a runtime (where agent code runs)."""
        return self.add("runtime", cls)

    def add_store(self, cls: type) -> type:
        """Register a result store; its ``name`` is the URL scheme it serves."""
        return self.add("store", cls)

    def add_token_source(self, cls: type) -> type:
        """Register a token source (where exact token ids and logprobs come from)."""
        return self.add("token_source", cls)

    def add_sampling_backend(self, cls: type) -> type:
        """Register a sampling backend (token ids in, token ids and logprobs out)."""
        return self.add("sampling_backend", cls)

    def add_trainer(self, cls: type) -> type:
        """Register a trainer (turns episode groups into a backend's batches)."""
        return self.add("trainer", cls)

    def add_framework(self, cls: type) -> type:
        """Register an agent-framework adapter."""
        return self.add("framework", cls)

    def add_metric_sink(self, cls: type) -> type:
        """Register a metric sink (where training-step metrics go: W&B, TensorBoard…)."""
        return self.add("metric_sink", cls)

    def add_sandbox_provider(self, cls: type) -> type:
        """Register a sandbox provider."""
        return self.add("sandbox_provider", cls)

    @contextlib.contextmanager
    def attributed_to(
        self, plugin: str, distribution: str | None, version: str | None, *, source: str = "code"
    ) -> Iterator[None]:
        """Components added inside this block are recorded as coming from ``plugin``.

        :param source: how the plugin was loaded (``builtin``, ``entry point``, ``config``,
            ``code``), for the fix an error suggests.
        """
        previous = self._current_plugin
        self._current_plugin = (plugin, distribution, version, source)
        try:
            yield
        finally:
            self._current_plugin = previous

    def added_since(
        self, snapshot: dict[ComponentKind, dict[str, ComponentInfo]]
    ) -> list[ComponentInfo]:
        """Components registered after :meth:`snapshot` was taken."""
        return [c for c in self.all() if c.name not in snapshot.get(c.kind, {})]

    def snapshot(self) -> dict[ComponentKind, dict[str, ComponentInfo]]:
        """A copy of the registrations, to :meth:`restore` when a plugin fails midway."""
        return {kind: dict(entries) for kind, entries in self._components.items()}

    def restore(self, snapshot: dict[ComponentKind, dict[str, ComponentInfo]]) -> None:
        """Return to a :meth:`snapshot` (kinds declared since are dropped too)."""
        self._components = {kind: dict(entries) for kind, entries in snapshot.items()}
        self.kinds = {k: v for k, v in self.kinds.items() if k in self._components}

    # Lookup -------------------------------------------------------------------------------

    def get(self, kind: ComponentKind, name: str, *, field: str | None = None) -> type[Any]:
        """The class registered as ``kind`` ``name``.

        :param field: the config field that named it, for the error message.
        :raises UnknownComponentError: naming the installed choices and, for a component of
            another rollhub distribution, the ``pip install`` that provides it.
        """
        info = self._components.get(kind, {}).get(name)
        if info is not None:
            return info.cls
        message = unknown_component_message(
            self._components, kind, name, field,
            install_hints=self.install_hints, load_failures=self.load_failures,
        )  # fmt: skip
        raise UnknownComponentError(
            message,
            kind=kind,
            name=name,
            installed=sorted(self._components.get(kind, {})),
        )

    def build(
        self,
        kind: ComponentKind,
        name: str,
        options: Mapping[str, Any],
        *,
        section: str,
        context: ComponentContext,
    ) -> Any:
        """Find, validate and construct a component: ``cls(options, context=context)``.

        A class whose constructor has no ``context`` parameter gets the keywords of
        :data:`LEGACY_KEYWORDS` instead, read from the context.

        :raises UnknownComponentError: no such component (with the install hint).
        :raises ConfigError: its options do not validate (naming ``section.key``).
        """
        cls, opts = build_options(self, kind, name, options, section=section)
        kwargs = _context_kwargs(cls, kind, context)
        return cls(opts, **kwargs) if opts is not None else cls(**kwargs)

    def info(self, kind: ComponentKind, name: str) -> ComponentInfo:
        """The registration record of a component (raises like :meth:`get`)."""
        self.get(kind, name)
        return self._components[kind][name]

    def names(self, kind: ComponentKind) -> list[str]:
        """Sorted config words registered for ``kind``."""
        return sorted(self._components.get(kind, {}))

    def all(self) -> list[ComponentInfo]:
        """Every registered component, ordered by kind (the core's first) then name."""
        return [
            self._components[k][n] for k in self._components for n in sorted(self._components[k])
        ]


def _duplicate_fix(existing: ComponentInfo, plugin: str, source: str) -> str:
    """What to do about two components with one name; disabling applies to entry points."""
    disable = [
        p for p, s in ((existing.plugin, existing.source), (plugin, source)) if s == "entry point"
    ]
    fixes = ["rename one"]
    if existing.source == "builtin" or source == "builtin":
        fixes = [f"rename the plugin's component: {existing.name!r} is a built-in name"]
    if disable:
        fixes.append(
            f"disable {' or '.join(map(repr, disable))} with ROLLHUB_DISABLE_PLUGINS={disable[-1]}"
        )
    return " or ".join(fixes)


def _context_kwargs(cls: type, kind: str, context: ComponentContext) -> dict[str, Any]:
    # the class's own signature: its __init__'s parameters without ``self``
    params = inspect.signature(cls).parameters
    if "context" in params:
        return {"context": context}
    open_ended = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    return {
        k: getattr(context, k) for k in LEGACY_KEYWORDS.get(kind, ()) if k in params or open_ended
    }


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def build_options(
    registry: ComponentRegistry,
    kind: ComponentKind,
    name: str,
    options: Mapping[str, Any],
    *,
    section: str,
) -> tuple[type, BaseModel | None]:
    """Find a component class and validate its options from config section ``section``.

    :returns: the class and its validated ``Options`` instance (None if it has no model).
    :raises UnknownComponentError: the name is not registered (names the distribution).
    :raises ConfigError: an option is unknown or has a bad value (names ``section.key``).
    """
    cls = registry.get(kind, name, field=f"{section}.name")
    model = getattr(cls, "Options", None)
    if model is None:
        if options:
            keys = ", ".join(sorted(options))
            raise ConfigError(
                f"{section}: {kind} {name!r} takes no options, got: {keys}", field=section
            )
        return cls, None
    try:
        return cls, model.model_validate(dict(options))
    except ValidationError as exc:
        raise ConfigError(
            explain(exc, model, f"{section} ({kind} {name!r})", prefix=section),
            field=first_loc(exc, prefix=section),
        ) from None
