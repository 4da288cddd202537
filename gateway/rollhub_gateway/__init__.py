"""rollhub-gateway: the rollhub token capture gateway.

An OpenAI- and Anthropic-compatible HTTP gateway that renders messages to token ids,
samples token-in/token-out from an inference engine, and records every turn's exact ids
and logprobs under the caller's session. The public names below are imported lazily, so
``import rollhub_gateway`` stays cheap.

A model call, in the order it runs (``docs/architecture.md``):
:mod:`.protocols.model_routes` (the call's pipeline) → :mod:`.sessions` →
:mod:`.admission` (body, limits) → :mod:`.protocols` (request parsing) →
:mod:`.model_call.plan` → :mod:`.conversation` (prompt ids) → :mod:`.model_call.runner`
(sampling via :mod:`.engines`) → :mod:`.trajectory.record` (the record; the weight
version) → :mod:`.protocols` (the answer). The application and its lifecycle:
:mod:`.gateway`; serving: :mod:`.http`; replicas: :mod:`.pool`; template families:
:mod:`.families`; chat templates: :mod:`.chat_templates`; durable sessions:
:mod:`.journal`.

Modules that moved into subpackages still import under their old names, with a
:class:`DeprecationWarning` (:mod:`._moved`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from rollhub_gateway import _moved

__version__ = "0.1.0"

__all__ = [
    "Gateway",
    "GatewayConfig",
    "GatewayTokenSource",
    "SessionPolicy",
    "ThreadedGateway",
    "build_gateway",
]

_LAZY = {
    "Gateway": "rollhub_gateway.gateway",
    "GatewayConfig": "rollhub_gateway.config",
    "GatewayTokenSource": "rollhub_gateway.token_source",
    "SessionPolicy": "rollhub_gateway.config",
    "ThreadedGateway": "rollhub_gateway.http.serving",
    "build_gateway": "rollhub_gateway.http.serving",
}

_moved.install()

if TYPE_CHECKING:
    from rollhub_gateway.config import GatewayConfig, SessionPolicy
    from rollhub_gateway.gateway import Gateway
    from rollhub_gateway.http.serving import ThreadedGateway, build_gateway
    from rollhub_gateway.token_source import GatewayTokenSource


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rollhub_gateway' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
