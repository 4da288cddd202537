"""Hook implementations of rollhub-torch (entry point ``rollhub`` → this module)."""

from __future__ import annotations

from rollhub import hookimpl
from rollhub.registry import ComponentRegistry


@hookimpl
def rollhub_register_components(registry: ComponentRegistry) -> None:
    """The ``torch`` trainer (torch is imported when it starts)."""
    from rollhub_torch.trainer import TorchTrainer

    registry.add_trainer(TorchTrainer)
