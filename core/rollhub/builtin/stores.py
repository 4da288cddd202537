"""Registers the core's built-in stores."""

from __future__ import annotations

from rollhub.markers import hookimpl
from rollhub.registry import ComponentRegistry


@hookimpl
def rollhub_register_components(registry: ComponentRegistry) -> None:
    """Nothing registered yet."""
