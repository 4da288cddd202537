"""From a ``rollhub.toml`` to its components: the one path every host of them takes.

The hub (:class:`~rollhub.hub.AsyncHub`) and code that needs only some sections (rLLM's
remote runtime uses ``[runtime]`` and ``[store]``) build them here, so every component is
constructed the same way: through the plugin host's registry, with one
:class:`~rollhub.registry.ComponentContext`, and a ``file://`` store that is absolute
(agent workers may run in another directory or on another machine).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Literal

from rollhub.config import RollhubConfig
from rollhub.registry import ComponentContext, ComponentRegistry
from rollhub.stores import open_store
from rollhub.stores.base import ResultStore

log = logging.getLogger(__name__)

__all__ = ["build_component", "component_context", "open_config_store", "store_url"]

#: the config sections that name one component of the kind of the same name
Section = Literal["runtime", "token_source", "trainer"]


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


def build_component(
    registry: ComponentRegistry, config: RollhubConfig, section: Section, context: ComponentContext
) -> Any:
    """The component the ``[section]`` of ``config`` names, built by ``registry``.

    :raises UnknownComponentError: no such component (with the install hint).
    :raises ConfigError: its options do not validate (naming ``section.key``).
    """
    part = getattr(config, section)
    return registry.build(section, part.name, part.options, section=section, context=context)


def store_url(config: RollhubConfig) -> str:
    """The ``[store]`` URL; a ``file://`` path relative to the config file made absolute."""
    url = config.store.url
    if url.startswith("file://"):
        return "file://" + str(config.path(url[len("file://") :]).resolve())
    return url


def open_config_store(config: RollhubConfig, registry: ComponentRegistry) -> ResultStore:
    """The result store of ``config``'s ``[store]`` section (see :func:`store_url`)."""
    return open_store(store_url(config), registry=registry, **config.store.options)
