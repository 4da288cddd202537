"""rollhub: turn production LLM agents into RL rollout workers for any training backend.

``import rollhub`` is cheap: it loads only the pluggy markers. Everything else is imported
on first use through the module ``__getattr__`` below.
"""

from __future__ import annotations

import importlib
from typing import Any

from rollhub.markers import hookimpl as hookimpl
from rollhub.markers import hookspec as hookspec

__version__ = "0.1.0"

#: public name -> module that defines it
_LAZY: dict[str, str] = {
    "AsyncHub": "rollhub.hub",
    "AsyncRolloutClient": "rollhub.client",
    "BatchItem": "rollhub.batch",
    "CaptureLost": "rollhub.errors",
    "CaptureSession": "rollhub.tokens",
    "ClusterLost": "rollhub.errors",
    "ComponentRegistry": "rollhub.registry",
    "ConfigError": "rollhub.errors",
    "Episode": "rollhub.episode",
    "EpisodeGroup": "rollhub.episode",
    "ErrorInfo": "rollhub.episode",
    "ExportError": "rollhub.errors",
    "GatewayError": "rollhub.errors",
    "Generation": "rollhub.sampling",
    "Hub": "rollhub.hub_sync",
    "PluginError": "rollhub.errors",
    "PluginLoadError": "rollhub.errors",
    "ResultStore": "rollhub.stores.base",
    "RewardError": "rollhub.errors",
    "RollhubConfig": "rollhub.config",
    "RollhubError": "rollhub.errors",
    "RolloutApp": "rollhub.app",
    "RolloutClient": "rollhub.client",
    "RolloutConfig": "rollhub.rollout",
    "RolloutFailed": "rollhub.errors",
    "RolloutFuture": "rollhub.client",
    "RolloutRequest": "rollhub.rollout",
    "RolloutSession": "rollhub.sessions",
    "RolloutTimeout": "rollhub.errors",
    "Runtime": "rollhub.runtime",
    "SamplingBackend": "rollhub.sampling",
    "SamplingParams": "rollhub.sampling",
    "SessionDump": "rollhub.sessions",
    "SessionError": "rollhub.errors",
    "StoreError": "rollhub.errors",
    "SubmissionError": "rollhub.errors",
    "SubmitReceipt": "rollhub.rollout",
    "TokenRetrievalError": "rollhub.errors",
    "TokenSource": "rollhub.tokens",
    "TraceRecord": "rollhub.trace",
    "Trainer": "rollhub.training.trainer",
    "UnknownComponentError": "rollhub.errors",
    "UsageError": "rollhub.errors",
    "load_config": "rollhub.config",
    "open_store": "rollhub.stores",
}

__all__ = sorted([*_LAZY, "__version__", "hookimpl", "hookspec"])


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rollhub' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
