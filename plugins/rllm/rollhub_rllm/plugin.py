"""Hook implementations of rollhub-rllm (entry point ``rollhub`` → this module)."""

from __future__ import annotations

from rollhub import hookimpl
from rollhub.registry import ComponentRegistry


@hookimpl
def rollhub_register_components(registry: ComponentRegistry) -> None:
    """Register the ``rllm`` token source and the ``rllm`` trainer (rLLM episode export)."""
    from rollhub_rllm.token_source import RllmTokenSource
    from rollhub_rllm.trainer import RllmEpisodeExport

    registry.add_token_source(RllmTokenSource)
    registry.add_trainer(RllmEpisodeExport)
