"""Hook implementations of rollhub-slime (entry point ``rollhub`` → this module).

Registers the ``slime`` trainer and, when rollhub-gateway is installed, the
``slime-router`` sampling backend, and validates ``[plugins.slime]`` at config time
(:mod:`rollhub_slime.settings`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from rollhub import hookimpl
from rollhub.registry import ComponentRegistry

if TYPE_CHECKING:
    from rollhub.config import RollhubConfig

log = logging.getLogger(__name__)


@hookimpl
def rollhub_register_components(registry: ComponentRegistry) -> None:
    """Register the slime trainer and the slime router sampling backend."""
    from rollhub_slime.trainer import SlimeTrainer

    registry.add_trainer(SlimeTrainer)
    try:
        from rollhub_slime.router import SlimeRouterBackend
    except ImportError as exc:
        if exc.name is None or not exc.name.startswith("rollhub_gateway"):
            raise
        log.debug("rollhub-gateway is not installed; no slime-router sampling backend")
        return
    registry.add_sampling_backend(SlimeRouterBackend)


@hookimpl
def rollhub_check_config(config: RollhubConfig) -> None:
    """Validate ``[plugins.slime]`` (or the older ``[trainer]`` spelling of it)."""
    from rollhub_slime.settings import slime_settings

    slime_settings(config)
