"""Subcommands of the ``rollhub`` CLI, one module each (``add_arguments`` + ``run``)."""
