"""The plugin module named by the ``rollhub`` entry point: it registers everything."""

from rollhub import hookimpl

from rollhub_tally.rewards import rollhub_collect_rewards  # noqa: F401  (a hook, re-exported)
from rollhub_tally.runtime import InlineRuntime
from rollhub_tally.store import MemoryStore
from rollhub_tally.trainer import TallyTrainer


@hookimpl
def rollhub_register_components(registry):
    registry.add_runtime(InlineRuntime)
    registry.add_store(MemoryStore)
    registry.add_trainer(TallyTrainer)


@hookimpl
def rollhub_add_commands(commands):
    commands.add("tally", "rollhub_tally.command", "print the tally of a run")
