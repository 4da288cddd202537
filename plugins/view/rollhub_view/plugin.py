"""Hook implementations of rollhub-view (entry point ``rollhub`` → this module).

Adds ``rollhub view RUN_DIR [RUN_DIR ...]``; nothing is imported until the command runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rollhub import hookimpl

if TYPE_CHECKING:
    from rollhub.commands import CommandTable


@hookimpl
def rollhub_add_commands(commands: CommandTable) -> None:
    """``rollhub view``."""
    commands.add(
        "view", "rollhub_view.cli",
        "see runs in the browser: curves, episodes, every sampled token (live while training)",
    )
