"""Hook implementations of rollhub-rllm (entry point ``rollhub`` → this module)."""

from __future__ import annotations

from rollhub import hookimpl
from rollhub.registry import ComponentRegistry


@hookimpl
def rollhub_register_components(registry: ComponentRegistry) -> None:
    """Register the ``rllm`` token source (rllm-model-gateway capture sessions)."""
    from rollhub_rllm.token_source import RllmTokenSource

    registry.add_token_source(RllmTokenSource)
