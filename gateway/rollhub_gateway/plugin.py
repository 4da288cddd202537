"""Hook implementations of rollhub-gateway (entry point ``rollhub`` → this module).

Registers the ``gateway`` token source and the sampling backends (``transformers``,
``vllm``, ``sglang``, ``tinker``, ``scripted``). Engine modules import their heavy
dependencies (torch, transformers, the tinker SDK) only when a backend is started, so
registration stays cheap; a backend module that is missing is skipped.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

from rollhub import hookimpl
from rollhub.registry import ComponentRegistry

log = logging.getLogger(__name__)

#: (module, class) of each sampling backend this distribution ships
BACKENDS: tuple[tuple[str, str], ...] = (
    ("rollhub_gateway.engines.transformers_engine", "TransformersBackend"),
    ("rollhub_gateway.engines.vllm", "VLLMBackend"),
    ("rollhub_gateway.engines.sglang", "SGLangBackend"),
    ("rollhub_gateway.engines.tinker", "TinkerBackend"),
    ("rollhub_gateway.engines.scripted", "ScriptedBackend"),
)


@hookimpl
def rollhub_add_commands(commands: Any) -> None:
    """``rollhub gateway serve|conformance``."""
    commands.add("gateway", "rollhub_gateway.cli", "run the token-capture gateway")


@hookimpl
def rollhub_register_components(registry: ComponentRegistry) -> None:
    """Register the gateway token source and the sampling backends."""
    from rollhub_gateway.token_source import GatewayTokenSource

    registry.add_token_source(GatewayTokenSource)
    for modname, clsname in BACKENDS:
        try:
            module = importlib.import_module(modname)
        except ImportError as exc:
            if exc.name != modname:
                raise
            log.debug("sampling backend module %s is not available", modname)
            continue
        registry.add_sampling_backend(getattr(module, clsname))
