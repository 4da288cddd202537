"""Hook implementations of rollhub-slime (entry point ``rollhub`` → this module)."""

from __future__ import annotations

from rollhub import hookimpl
from rollhub.registry import ComponentRegistry


@hookimpl
def rollhub_register_components(registry: ComponentRegistry) -> None:
    """Components of rollhub-slime are registered here as they land."""
