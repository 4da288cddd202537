"""Hook implementations of rollhub-gateway (entry point ``rollhub`` → this module).

Registers the ``gateway`` token source and the sampling backends of
:mod:`rollhub_gateway.engines` (``transformers``, ``vllm``, ``sglang``, ``tinker``,
``scripted``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from rollhub import hookimpl
from rollhub.registry import ComponentRegistry

from rollhub_gateway.engines import register_backends

if TYPE_CHECKING:
    from rollhub.commands import CommandTable
    from rollhub.config import RollhubConfig

log = logging.getLogger(__name__)


@hookimpl
def rollhub_add_commands(commands: CommandTable) -> None:
    """``rollhub gateway serve|conformance``."""
    commands.add("gateway", "rollhub_gateway.cli", "run the token-capture gateway")


@hookimpl
def rollhub_register_components(registry: ComponentRegistry) -> None:
    """Register the gateway token source and the sampling backends."""
    # imported here: plugin discovery loads this module in every rollhub process
    from rollhub_gateway.token_source import GatewayTokenSource

    registry.add_token_source(GatewayTokenSource)
    register_backends(registry)


@hookimpl
def rollhub_check_config(config: RollhubConfig, registry: ComponentRegistry) -> None:
    """An engine the gateway could not build, and ``[[policies]]`` with gateway settings
    that cannot serve them, are refused."""
    from rollhub_gateway.engines.configured import check_engine
    from rollhub_gateway.policies.serving import check_policy_serving

    check_engine(config, registry)
    check_policy_serving(config)
