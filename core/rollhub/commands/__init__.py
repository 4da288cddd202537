"""Subcommands of the ``rollhub`` CLI, one module each (``add_arguments`` + ``run``), and
the table that names them."""

from __future__ import annotations

from rollhub.errors import PluginError

__all__ = ["COMMANDS", "CommandTable"]

#: the core's subcommands: name -> (module, help); each module has ``add_arguments(parser)``
#: and ``run(args) -> int``. Plugins add theirs through ``rollhub_add_commands``.
COMMANDS: dict[str, tuple[str, str]] = {
    "plugins": ("rollhub.commands.plugins", "list installed plugins, components and load failures"),
    "config": ("rollhub.commands.config", "check a rollhub.toml"),
    "run": ("rollhub.commands.run", "run an experiment or a training run"),
    "eval": ("rollhub.commands.eval", "score a policy (base, checkpoint, endpoint) on held-out prompts"),
    "compare": ("rollhub.commands.compare", "training runs side by side and against a control, with intervals"),
    "export": ("rollhub.commands.export", "convert exported episodes between Parquet and JSONL"),
    "deploy": ("rollhub.commands.deploy", "ship an agent or a sandbox image to AgentCore Runtime"),
}


class CommandTable:
    """Subcommands by name, filled by the core and the ``rollhub_add_commands`` hook."""

    def __init__(self, commands: dict[str, tuple[str, str]] | None = None) -> None:
        self.commands: dict[str, tuple[str, str]] = dict(commands or {})

    def add(self, name: str, module: str, help: str) -> None:
        """Add ``rollhub NAME``; a name already taken is a :class:`PluginError`."""
        if name in self.commands and self.commands[name][0] != module:
            raise PluginError(
                f"two plugins add the subcommand {name!r}: {self.commands[name][0]} and {module}"
            )
        self.commands[name] = (module, help)
