"""The agent side: an AgentCore-compatible app that runs rollouts and stores their results.

::

    from rollhub.app import RolloutApp

    app = RolloutApp()

    @app.rollout_entrypoint
    def solve(payload, context):
        ...
        return {"rewards": 1.0}

See ``docs/agent-app.md``. The stored result documents are :mod:`rollhub.results` (no
server dependencies: the client side reads results with it).
"""

from __future__ import annotations

from rollhub.app.context import SESSION_HEADER, PingStatus, RolloutContext
from rollhub.app.runner import RunningRollout
from rollhub.app.server import InvalidRolloutError, RolloutApp
from rollhub.results.document import InvalidResultError

__all__ = [
    "SESSION_HEADER",
    "InvalidResultError",
    "InvalidRolloutError",
    "PingStatus",
    "RolloutApp",
    "RolloutContext",
    "RunningRollout",
]
