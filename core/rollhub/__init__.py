"""rollhub: turn production LLM agents into RL rollout workers for any training backend.

``import rollhub`` is cheap: it loads only the pluggy markers and the finder that keeps the
old paths of moved modules importable (:mod:`rollhub.moved_modules`). Everything else is
imported on first use through the module ``__getattr__`` below.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from rollhub import moved_modules
from rollhub.plugin_host.markers import hookimpl as hookimpl
from rollhub.plugin_host.markers import hookspec as hookspec

if TYPE_CHECKING:  # the names __getattr__ loads on first use, for type checkers
    from rollhub.app import RolloutApp as RolloutApp
    from rollhub.batch import BatchItem as BatchItem
    from rollhub.client import AsyncRolloutClient as AsyncRolloutClient
    from rollhub.client import RolloutClient as RolloutClient
    from rollhub.client import RolloutFuture as RolloutFuture
    from rollhub.config import RollhubConfig as RollhubConfig
    from rollhub.config import load_config as load_config
    from rollhub.episode import Episode as Episode
    from rollhub.episode import EpisodeGroup as EpisodeGroup
    from rollhub.episode import ErrorInfo as ErrorInfo
    from rollhub.errors import AgentRewardError as AgentRewardError
    from rollhub.errors import CaptureLost as CaptureLost
    from rollhub.errors import ClusterLost as ClusterLost
    from rollhub.errors import ConfigError as ConfigError
    from rollhub.errors import ExportError as ExportError
    from rollhub.errors import GatewayError as GatewayError
    from rollhub.errors import PluginError as PluginError
    from rollhub.errors import PluginLoadError as PluginLoadError
    from rollhub.errors import RewardError as RewardError
    from rollhub.errors import RollhubError as RollhubError
    from rollhub.errors import RolloutFailed as RolloutFailed
    from rollhub.errors import RolloutTimeout as RolloutTimeout
    from rollhub.errors import SessionError as SessionError
    from rollhub.errors import StoreError as StoreError
    from rollhub.errors import SubmissionError as SubmissionError
    from rollhub.errors import TokenRetrievalError as TokenRetrievalError
    from rollhub.errors import UnknownComponentError as UnknownComponentError
    from rollhub.errors import UsageError as UsageError
    from rollhub.hubs.async_hub import AsyncHub as AsyncHub
    from rollhub.hubs.sync_hub import Hub as Hub
    from rollhub.registry import ComponentRegistry as ComponentRegistry
    from rollhub.rollout import RolloutConfig as RolloutConfig
    from rollhub.rollout import RolloutRequest as RolloutRequest
    from rollhub.rollout import SubmitReceipt as SubmitReceipt
    from rollhub.runtime import Runtime as Runtime
    from rollhub.sampling import Generation as Generation
    from rollhub.sampling import SamplingBackend as SamplingBackend
    from rollhub.sampling import SamplingParams as SamplingParams
    from rollhub.sessions import RolloutSession as RolloutSession
    from rollhub.sessions import SessionDump as SessionDump
    from rollhub.stores import open_store as open_store
    from rollhub.stores.base import ResultStore as ResultStore
    from rollhub.tokens import CaptureSession as CaptureSession
    from rollhub.tokens import TokenSource as TokenSource
    from rollhub.trace import TraceRecord as TraceRecord
    from rollhub.training.trainer import Trainer as Trainer

__version__ = "0.1.0"

#: public name -> module that defines it
_LAZY: dict[str, str] = {
    "AgentRewardError": "rollhub.errors",
    "AsyncHub": "rollhub.hubs.async_hub",
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
    "Hub": "rollhub.hubs.sync_hub",
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

moved_modules.install(moved_modules.MOVED)


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rollhub' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
