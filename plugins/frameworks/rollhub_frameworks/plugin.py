"""Hook implementations of rollhub-frameworks (entry point ``rollhub`` → this module)."""

from __future__ import annotations

from rollhub import hookimpl
from rollhub.registry import ComponentRegistry

from rollhub_frameworks.langgraph import LangGraphFramework
from rollhub_frameworks.strands import StrandsFramework


@hookimpl
def rollhub_register_components(registry: ComponentRegistry) -> None:
    """Register the ``strands`` and ``langgraph`` framework components."""
    registry.add_framework(StrandsFramework)
    registry.add_framework(LangGraphFramework)
