"""Hook implementations of rollhub-tinker (entry point ``rollhub`` → this module).

Registers the ``tinker`` trainer and adds ``rollhub tinker-local setup|serve`` (a
Tinker-compatible training server on this machine's CPU).
"""

from __future__ import annotations

from typing import Any

from rollhub import hookimpl
from rollhub.registry import ComponentRegistry


@hookimpl
def rollhub_register_components(registry: ComponentRegistry) -> None:
    """The ``tinker`` trainer (the SDK is imported when it starts)."""
    from rollhub_tinker.trainer import TinkerTrainer

    registry.add_trainer(TinkerTrainer)


@hookimpl
def rollhub_add_commands(commands: Any) -> None:
    """``rollhub tinker-local``."""
    commands.add(
        "tinker-local", "rollhub_tinker.local_server_cli",
        "set up and serve a Tinker-compatible training server on this machine (CPU)",
    )
