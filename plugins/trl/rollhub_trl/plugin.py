"""Hook implementations of rollhub-trl (entry point ``rollhub`` → this module)."""

from __future__ import annotations

from rollhub import hookimpl
from rollhub.registry import ComponentRegistry


@hookimpl
def rollhub_register_components(registry: ComponentRegistry) -> None:
    """The ``trl`` trainer (trl is imported when it starts)."""
    from rollhub_trl.trainer import TrlTrainer

    registry.add_trainer(TrlTrainer)
