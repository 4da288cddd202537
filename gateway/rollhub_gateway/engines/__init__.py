"""Sampling backends of the gateway: token ids in, sampled ids and logprobs out.

:data:`BACKENDS` names each backend this distribution ships; :func:`register_backends`
adds them to a component registry. Engine modules import their heavy dependencies
(torch, transformers, the tinker SDK) only when a backend is started, so registration
stays cheap; a backend module that is missing is skipped.
"""

from __future__ import annotations

import importlib
import logging

from rollhub.registry import ComponentRegistry

__all__ = ["BACKENDS", "register_backends"]

log = logging.getLogger(__name__)

#: (module, class) of each sampling backend this distribution ships
BACKENDS: tuple[tuple[str, str], ...] = (
    ("rollhub_gateway.engines.transformers_engine", "TransformersBackend"),
    ("rollhub_gateway.engines.vllm", "VLLMBackend"),
    ("rollhub_gateway.engines.sglang", "SGLangBackend"),
    ("rollhub_gateway.engines.tinker", "TinkerBackend"),
    ("rollhub_gateway.engines.scripted", "ScriptedBackend"),
)


def register_backends(registry: ComponentRegistry) -> None:
    """Add every sampling backend of :data:`BACKENDS` whose module imports to ``registry``."""
    for modname, clsname in BACKENDS:
        try:
            module = importlib.import_module(modname)
        except ImportError as exc:
            if exc.name != modname:
                raise
            log.debug("sampling backend module %s is not available", modname)
            continue
        registry.add_sampling_backend(getattr(module, clsname))
