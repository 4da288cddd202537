"""Compatibility with agentcore-rl-toolkit: its public API, a local data plane, a plugin.

Code written for agentcore-rl-toolkit (0.1.4 / 0.2.0) moves by changing its import::

    # from agentcore_rl_toolkit import AgentCoreRLApp, RolloutClient
    from rollhub.compat import AgentCoreRLApp, RolloutClient

Names (loaded on first use, so importing the package stays cheap):

- ``AgentCoreRLApp`` (:mod:`rollhub.compat.agentcore_rl`), ``RolloutConfig``
  (:mod:`rollhub.compat.upstream_store`)
- ``RolloutClient`` (:mod:`rollhub.compat.upstream_client`), ``RolloutFuture`` and
  ``BatchItem`` (:mod:`rollhub.compat.upstream_futures`), ``BatchResult`` and
  ``AsyncBatchResult`` (:mod:`rollhub.compat.upstream_batch`)
- ``RewardFunction`` (:mod:`rollhub.compat.reward`)
- ``AgentCoreRuntimeApp`` (:mod:`rollhub.compat.runtime_app`), ``AgentCoreHttpClient``,
  ``InvocationHandle`` and ``InvocationError`` (:mod:`rollhub.compat.runtime_client`)
- rollout sessions (upstream's ``rollout_session`` modules): ``make_session`` and
  ``SessionBackendConfig`` (:mod:`rollhub.compat.session_factory`), ``RolloutDumpResponse``
  and ``RolloutContractError`` (:mod:`rollhub.compat.session_wire`),
  ``RolloutAgentExecutor`` and ``make_ping_handler`` (:mod:`rollhub.compat.a2a_executor`),
  ``A2ARolloutSession``, ``AgentCoreA2ASession``, ``DockerA2ASession`` and
  ``RolloutA2AError`` (:mod:`rollhub.compat.a2a_sessions`), ``AgentCoreS3Session``
  (:mod:`rollhub.compat.s3_session`), ``AgentCoreHttpSession``
  (:mod:`rollhub.compat.http_session`), ``RolloutSession``, ``RolloutSessionBounds``,
  ``run_rollout_with_bounds`` and the ``Local*`` bounds (:mod:`rollhub.compat.session_bounds`),
  ``PersistentDict`` and ``NullPersister`` (:mod:`rollhub.compat.session_state`)

Also here: :mod:`rollhub.compat.upstream_layout` (reading upstream's result documents with
rollhub's client), :mod:`rollhub.compat.plugin` (the ``agentcore-rl+s3://`` store scheme)
and :mod:`rollhub.compat.agentcore_local` (``LocalAgentCore``, the ``bedrock-agentcore``
data plane on loopback). See ``docs/migrating-from-agentcore-rl-toolkit.md``.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the names __getattr__ loads on first use, for type checkers
    from rollhub.compat.a2a_executor import RolloutAgentExecutor as RolloutAgentExecutor
    from rollhub.compat.a2a_executor import make_ping_handler as make_ping_handler
    from rollhub.compat.a2a_sessions import A2ARolloutSession as A2ARolloutSession
    from rollhub.compat.a2a_sessions import AgentCoreA2ASession as AgentCoreA2ASession
    from rollhub.compat.a2a_sessions import DockerA2ASession as DockerA2ASession
    from rollhub.compat.a2a_sessions import RolloutA2AError as RolloutA2AError
    from rollhub.compat.agentcore_rl import AgentCoreRLApp as AgentCoreRLApp
    from rollhub.compat.http_session import AgentCoreHttpSession as AgentCoreHttpSession
    from rollhub.compat.reward import RewardFunction as RewardFunction
    from rollhub.compat.runtime_app import AgentCoreRuntimeApp as AgentCoreRuntimeApp
    from rollhub.compat.runtime_client import AgentCoreHttpClient as AgentCoreHttpClient
    from rollhub.compat.runtime_client import InvocationError as InvocationError
    from rollhub.compat.runtime_client import InvocationHandle as InvocationHandle
    from rollhub.compat.s3_session import AgentCoreS3Session as AgentCoreS3Session
    from rollhub.compat.session_bounds import LocalPriorityAssigner as LocalPriorityAssigner
    from rollhub.compat.session_bounds import LocalPrioritySemaphore as LocalPrioritySemaphore
    from rollhub.compat.session_bounds import LocalRateLimiter as LocalRateLimiter
    from rollhub.compat.session_bounds import RolloutSession as RolloutSession
    from rollhub.compat.session_bounds import RolloutSessionBounds as RolloutSessionBounds
    from rollhub.compat.session_bounds import run_rollout_with_bounds as run_rollout_with_bounds
    from rollhub.compat.session_factory import SessionBackendConfig as SessionBackendConfig
    from rollhub.compat.session_factory import make_session as make_session
    from rollhub.compat.session_state import NullPersister as NullPersister
    from rollhub.compat.session_state import PersistentDict as PersistentDict
    from rollhub.compat.session_wire import RolloutContractError as RolloutContractError
    from rollhub.compat.session_wire import RolloutDumpResponse as RolloutDumpResponse
    from rollhub.compat.upstream_batch import AsyncBatchResult as AsyncBatchResult
    from rollhub.compat.upstream_batch import BatchResult as BatchResult
    from rollhub.compat.upstream_client import RolloutClient as RolloutClient
    from rollhub.compat.upstream_futures import BatchItem as BatchItem
    from rollhub.compat.upstream_futures import RolloutFuture as RolloutFuture
    from rollhub.compat.upstream_store import RolloutConfig as RolloutConfig

_HOMES = {
    "A2ARolloutSession": "rollhub.compat.a2a_sessions",
    "AgentCoreA2ASession": "rollhub.compat.a2a_sessions",
    "AgentCoreHttpClient": "rollhub.compat.runtime_client",
    "AgentCoreHttpSession": "rollhub.compat.http_session",
    "AgentCoreRuntimeApp": "rollhub.compat.runtime_app",
    "AgentCoreS3Session": "rollhub.compat.s3_session",
    "DockerA2ASession": "rollhub.compat.a2a_sessions",
    "InvocationError": "rollhub.compat.runtime_client",
    "InvocationHandle": "rollhub.compat.runtime_client",
    "LocalPriorityAssigner": "rollhub.compat.session_bounds",
    "LocalPrioritySemaphore": "rollhub.compat.session_bounds",
    "LocalRateLimiter": "rollhub.compat.session_bounds",
    "NullPersister": "rollhub.compat.session_state",
    "PersistentDict": "rollhub.compat.session_state",
    "RolloutA2AError": "rollhub.compat.a2a_sessions",
    "RolloutAgentExecutor": "rollhub.compat.a2a_executor",
    "RolloutContractError": "rollhub.compat.session_wire",
    "RolloutDumpResponse": "rollhub.compat.session_wire",
    "RolloutSession": "rollhub.compat.session_bounds",
    "RolloutSessionBounds": "rollhub.compat.session_bounds",
    "SessionBackendConfig": "rollhub.compat.session_factory",
    "make_ping_handler": "rollhub.compat.a2a_executor",
    "make_session": "rollhub.compat.session_factory",
    "run_rollout_with_bounds": "rollhub.compat.session_bounds",
    "AgentCoreRLApp": "rollhub.compat.agentcore_rl",
    "AsyncBatchResult": "rollhub.compat.upstream_batch",
    "BatchItem": "rollhub.compat.upstream_futures",
    "BatchResult": "rollhub.compat.upstream_batch",
    "RewardFunction": "rollhub.compat.reward",
    "RolloutClient": "rollhub.compat.upstream_client",
    "RolloutConfig": "rollhub.compat.upstream_store",
    "RolloutFuture": "rollhub.compat.upstream_futures",
}


__all__ = sorted(_HOMES)


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
