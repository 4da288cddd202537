"""Hook implementations of rollhub-tinker (entry point ``rollhub`` → this module)."""

from __future__ import annotations

from rollhub import hookimpl
from rollhub.registry import ComponentRegistry


@hookimpl
def rollhub_register_components(registry: ComponentRegistry) -> None:
    """Components of rollhub-tinker are registered here as they land."""
