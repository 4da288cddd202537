"""The component registry: which runtimes, stores, token sources… exist, by config word.

Plugins fill it from their ``rollhub_register_components(registry)`` hook. Each component
class names itself with a ``name`` class attribute (the word users write in config) and may
carry a pydantic ``Options`` model that validates its config section.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from rollhub.errors import PluginError, UnknownComponentError

log = logging.getLogger(__name__)

ComponentKind = Literal[
    "runtime",
    "store",
    "token_source",
    "sampling_backend",
    "trainer",
    "framework",
    "sandbox_provider",
    "metric_sink",
]

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

#: Components that ship in rollhub distributions other than the core, so that an error can
#: say which distribution to install.
KNOWN_DISTRIBUTIONS: dict[tuple[str, str], str] = {
    ("token_source", "gateway"): "rollhub-gateway",
    ("token_source", "rllm"): "rollhub-rllm",
    ("sampling_backend", "transformers"): "rollhub-gateway[transformers]",
    ("sampling_backend", "vllm"): "rollhub-gateway",
    ("sampling_backend", "sglang"): "rollhub-gateway",
    ("sampling_backend", "tinker"): "rollhub-gateway",
    ("sampling_backend", "slime-router"): "rollhub-slime",
    ("trainer", "verl"): "rollhub-verl",
    ("trainer", "slime"): "rollhub-slime",
    ("trainer", "tinker"): "rollhub-tinker",
    ("trainer", "rllm"): "rollhub-rllm",
    ("framework", "strands"): "rollhub-frameworks",
    ("framework", "langgraph"): "rollhub-frameworks",
    ("sandbox_provider", "local"): "rollhub-sandbox",
    ("sandbox_provider", "agentcore"): "rollhub-sandbox",
    ("sandbox_provider", "docker"): "rollhub-sandbox",
    ("runtime", "ray"): "rollhub[ray]",
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


class ComponentRegistry:
    """Components by kind and name. Filled by plugins, read by config and the hub."""

    def __init__(self) -> None:
        self._components: dict[ComponentKind, dict[str, ComponentInfo]] = {k: {} for k in KINDS}
        self._current_plugin: tuple[str, str | None, str | None] = ("<code>", None, None)
        #: plugins that failed to load, by plugin name; consulted when a lookup misses.
        self.load_failures: dict[str, Any] = {}

    # Registration -------------------------------------------------------------------------

    def add(self, kind: ComponentKind, cls: type) -> type:
        """Register ``cls`` as a component of ``kind`` under ``cls.name``.

        Returns the class, so this works as a decorator too. Registering a second class under
        a name already taken is a :class:`PluginError` naming both plugins.
        """
        if kind not in self._components:
            raise PluginError(f"unknown component kind {kind!r}; kinds: {', '.join(KINDS)}")
        name = getattr(cls, "name", None)
        if not isinstance(name, str) or not name:
            raise PluginError(
                f"{cls.__module__}.{cls.__qualname__} has no 'name' class attribute; "
                f"set name = '<config word>' on the class"
            )
        plugin, dist, version = self._current_plugin
        existing = self._components[kind].get(name)
        if existing is not None and existing.cls is not cls:
            raise PluginError(
                f"two {kind} components are named {name!r}: {_qualname(existing.cls)} "
                f"(plugin {existing.plugin}) and {_qualname(cls)} (plugin {plugin}); "
                f"rename one or disable a plugin with ROLLHUB_DISABLE_PLUGINS"
            )
        self._components[kind][name] = ComponentInfo(kind, name, cls, plugin, dist, version)
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
        self, plugin: str, distribution: str | None, version: str | None
    ) -> Iterator[None]:
        """Components added inside this block are recorded as coming from ``plugin``."""
        previous = self._current_plugin
        self._current_plugin = (plugin, distribution, version)
        try:
            yield
        finally:
            self._current_plugin = previous

    def added_since(self, snapshot: dict[ComponentKind, dict[str, ComponentInfo]]) -> list[ComponentInfo]:
        """Components registered after :meth:`snapshot` was taken."""
        return [c for c in self.all() if c.name not in snapshot.get(c.kind, {})]

    def snapshot(self) -> dict[ComponentKind, dict[str, ComponentInfo]]:
        """A copy of the registrations, to :meth:`restore` when a plugin fails midway."""
        return {kind: dict(entries) for kind, entries in self._components.items()}

    def restore(self, snapshot: dict[ComponentKind, dict[str, ComponentInfo]]) -> None:
        """Return to a :meth:`snapshot`."""
        self._components = {kind: dict(entries) for kind, entries in snapshot.items()}

    # Lookup -------------------------------------------------------------------------------

    def get(self, kind: ComponentKind, name: str, *, field: str | None = None) -> type:
        """The class registered as ``kind`` ``name``.

        :param field: the config field that named it, for the error message.
        :raises UnknownComponentError: naming the installed choices and, for a component of
            another rollhub distribution, the ``pip install`` that provides it.
        """
        info = self._components.get(kind, {}).get(name)
        if info is not None:
            return info.cls
        raise UnknownComponentError(
            self._missing_message(kind, name, field),
            kind=kind,
            name=name,
            installed=sorted(self._components.get(kind, {})),
        )

    def info(self, kind: ComponentKind, name: str) -> ComponentInfo:
        """The registration record of a component (raises like :meth:`get`)."""
        self.get(kind, name)
        return self._components[kind][name]

    def names(self, kind: ComponentKind) -> list[str]:
        """Sorted config words registered for ``kind``."""
        return sorted(self._components[kind])

    def all(self) -> list[ComponentInfo]:
        """Every registered component, ordered by kind then name."""
        return [self._components[k][n] for k in KINDS for n in sorted(self._components[k])]

    def _missing_message(self, kind: str, name: str, field: str | None) -> str:
        where = f" ({field})" if field else ""
        installed = ", ".join(sorted(self._components.get(kind, {}))) or "none"
        msg = f"no {kind.replace('_', ' ')} named {name!r}{where}; installed: {installed}"
        dist = KNOWN_DISTRIBUTIONS.get((kind, name))
        if dist is not None:
            failed = [p for p, f in self.load_failures.items() if _dist_of(f) == dist.split("[")[0]]
            if failed:
                msg += f"; plugin {failed[0]!r} from {dist} is installed but failed to load: "
                msg += str(self.load_failures[failed[0]])
            elif _installed(dist.split("[")[0]):
                msg += (
                    f"; {dist.split('[')[0]} is installed but this version provides no "
                    f"{kind.replace('_', ' ')} {name!r} (upgrade it, or check its extras: {dist})"
                )
            else:
                msg += f"; it ships in {dist}: pip install '{dist}'"
        else:
            close = [n for n in self._components.get(kind, {}) if _similar(n, name)]
            if close:
                msg += f"; did you mean {close[0]!r}?"
        return msg


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _dist_of(failure: Any) -> str | None:
    return getattr(failure, "distribution", None)


def _installed(distribution: str) -> bool:
    from importlib import metadata

    try:
        metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return False
    return True


def _similar(a: str, b: str) -> bool:
    import difflib

    return difflib.SequenceMatcher(None, a, b).ratio() >= 0.6
