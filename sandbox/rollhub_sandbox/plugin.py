"""Hook implementations of rollhub-sandbox (entry point ``rollhub`` → this module)."""

from __future__ import annotations

from rollhub import hookimpl
from rollhub.registry import ComponentRegistry


@hookimpl
def rollhub_register_components(registry: ComponentRegistry) -> None:
    """Register the ``local``, ``agentcore`` and ``docker`` sandbox providers.

    The provider modules import boto3 and the Docker CLI lazily, so this stays cheap.
    """
    from rollhub_sandbox.agentcore import AgentCoreProvider
    from rollhub_sandbox.docker import DockerProvider
    from rollhub_sandbox.local import LocalProvider

    registry.add_sandbox_provider(LocalProvider)
    registry.add_sandbox_provider(AgentCoreProvider)
    registry.add_sandbox_provider(DockerProvider)


# The reward hook lives with its settings and pure scoring functions.
from rollhub_sandbox.rewards import rollhub_check_config, rollhub_collect_rewards  # noqa: E402

__all__ = ["rollhub_check_config", "rollhub_collect_rewards", "rollhub_register_components"]
