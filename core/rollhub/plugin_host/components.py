"""From a ``rollhub.toml`` to its components: the one path every host of them takes.

The hub (:class:`~rollhub.hubs.async_hub.AsyncHub`) and code that needs only some sections (rLLM's
remote runtime uses ``[runtime]`` and ``[store]``) build them here, so every component is
constructed the same way: through the plugin host's registry, with one
:class:`~rollhub.registry.ComponentContext`, and a ``file://`` store that is absolute
(agent workers may run in another directory or on another machine).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Literal, overload

from rollhub.config import RollhubConfig
from rollhub.errors import PluginError
from rollhub.registry import ComponentContext, ComponentRegistry
from rollhub.runtime import Runtime
from rollhub.stores import open_store
from rollhub.stores.base import ResultStore
from rollhub.tokens import TokenSource
from rollhub.training.trainer import Trainer

log = logging.getLogger(__name__)

__all__ = ["build_component", "component_context", "open_config_store", "store_url"]

#: the config sections that name one component of the kind of the same name
Section = Literal["runtime", "token_source", "trainer"]

#: the base class every component of a section's kind derives from
BASES: dict[str, type[Runtime | TokenSource | Trainer]] = {
    "runtime": Runtime,
    "token_source": TokenSource,
    "trainer": Trainer,
}


def component_context(
    config: RollhubConfig, *, run_dir: Path | None = None, exp_id: str | None = None
) -> ComponentContext:
    """What components built from ``config`` are told.

    :param exp_id: the experiment id (default: the config's).
    """
    return ComponentContext(
        base_dir=config.base_dir,
        run_dir=run_dir,
        exp_id=exp_id or config.experiment.resolved_exp_id,
        config=config,
    )


@overload
def build_component(
    registry: ComponentRegistry,
    config: RollhubConfig,
    section: Literal["runtime"],
    context: ComponentContext,
) -> Runtime: ...
@overload
def build_component(
    registry: ComponentRegistry,
    config: RollhubConfig,
    section: Literal["token_source"],
    context: ComponentContext,
) -> TokenSource: ...
@overload
def build_component(
    registry: ComponentRegistry,
    config: RollhubConfig,
    section: Literal["trainer"],
    context: ComponentContext,
) -> Trainer: ...
def build_component(
    registry: ComponentRegistry, config: RollhubConfig, section: Section, context: ComponentContext
) -> Runtime | TokenSource | Trainer:
    """The component the ``[section]`` of ``config`` names, built by ``registry``.

    :raises UnknownComponentError: no such component (with the install hint).
    :raises ConfigError: its options do not validate (naming ``section.key``).
    :raises PluginError: the registered class does not derive from its kind's base
        (:class:`~rollhub.runtime.Runtime`, :class:`~rollhub.tokens.TokenSource`,
        :class:`~rollhub.training.Trainer`).
    """
    part = getattr(config, section)
    built = registry.build(section, part.name, part.options, section=section, context=context)
    base = BASES[section]
    if not isinstance(built, base):
        raise PluginError(
            f"{section} {part.name!r} is a {type(built).__module__}.{type(built).__qualname__}, "
            f"not a {base.__module__}.{base.__qualname__}: its plugin must subclass that"
        )
    return built


def store_url(config: RollhubConfig) -> str:
    """The ``[store]`` URL; a ``file://`` path relative to the config file made absolute."""
    url = config.store.url
    if url.startswith("file://"):
        return "file://" + str(config.path(url[len("file://") :]).resolve())
    return url


def open_config_store(config: RollhubConfig, registry: ComponentRegistry) -> ResultStore:
    """The result store of ``config``'s ``[store]`` section (see :func:`store_url`)."""
    return open_store(store_url(config), registry=registry, **config.store.options)
