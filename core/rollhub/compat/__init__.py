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
from typing import Any

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


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
