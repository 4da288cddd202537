"""Hook implementations of rollhub-verl (entry point ``rollhub`` → this module)."""

from __future__ import annotations

from rollhub import hookimpl
from rollhub.registry import ComponentRegistry


@hookimpl
def rollhub_register_components(registry: ComponentRegistry) -> None:
    """Components of rollhub-verl are registered here as they land."""
