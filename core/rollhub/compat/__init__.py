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

Also here: :mod:`rollhub.compat.upstream_layout` (reading upstream's result documents with
rollhub's client), :mod:`rollhub.compat.plugin` (the ``agentcore-rl+s3://`` store scheme)
and :mod:`rollhub.compat.agentcore_local` (``LocalAgentCore``, the ``bedrock-agentcore``
data plane on loopback). See ``docs/migrating-from-agentcore-rl-toolkit.md``.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__all__ = [
    "AgentCoreRLApp",
    "AsyncBatchResult",
    "BatchItem",
    "BatchResult",
    "RewardFunction",
    "RolloutClient",
    "RolloutConfig",
    "RolloutFuture",
]

_HOMES = {
    "AgentCoreRLApp": "rollhub.compat.agentcore_rl",
    "AsyncBatchResult": "rollhub.compat.upstream_batch",
    "BatchItem": "rollhub.compat.upstream_futures",
    "BatchResult": "rollhub.compat.upstream_batch",
    "RewardFunction": "rollhub.compat.reward",
    "RolloutClient": "rollhub.compat.upstream_client",
    "RolloutConfig": "rollhub.compat.upstream_store",
    "RolloutFuture": "rollhub.compat.upstream_futures",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
