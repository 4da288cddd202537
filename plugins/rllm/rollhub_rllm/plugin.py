"""Hook implementations of rollhub-rllm (entry point ``rollhub`` → this module)."""

from __future__ import annotations

from rollhub import hookimpl
from rollhub.registry import ComponentRegistry


@hookimpl
def rollhub_register_components(registry: ComponentRegistry) -> None:
    """Components of rollhub-rllm are registered here as they land."""
