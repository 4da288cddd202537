"""Registers the core's built-in runtimes: ``local``, ``agentcore``, ``ray`` and ``a2a``.

Only the classes are imported; boto3, ray and a2a-sdk are imported when a runtime is built.
"""

from __future__ import annotations

from rollhub.plugin_host.markers import hookimpl
from rollhub.registry import ComponentRegistry


@hookimpl
def rollhub_register_components(registry: ComponentRegistry) -> None:
    """Add the local, agentcore, ray and a2a runtimes."""
    from rollhub.runtimes.a2a import A2ARuntime
    from rollhub.runtimes.agentcore import AgentCoreRuntime
    from rollhub.runtimes.local import LocalRuntime
    from rollhub.runtimes.ray import RayRuntime

    registry.add_runtime(LocalRuntime)
    registry.add_runtime(AgentCoreRuntime)
    registry.add_runtime(RayRuntime)
    registry.add_runtime(A2ARuntime)
