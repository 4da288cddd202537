"""The agent side: an AgentCore-compatible app that runs rollouts and stores their results.

::

    from rollhub.app import RolloutApp

    app = RolloutApp()

    @app.rollout_entrypoint
    def solve(payload, context):
        ...
        return {"rewards": 1.0}

See ``docs/agent-app.md``. :mod:`rollhub.app.result` (building and reading stored result
documents) has no server dependencies and is what the client side reads results with.
"""

from __future__ import annotations

from rollhub.app.context import SESSION_HEADER, PingStatus, RolloutContext
from rollhub.app.result import (
    InvalidResultError,
    ResultView,
    build_result_document,
    read_result,
    read_status,
)
from rollhub.app.runner import RunningRollout
from rollhub.app.server import InvalidRolloutError, RolloutApp

__all__ = [
    "SESSION_HEADER",
    "InvalidResultError",
    "InvalidRolloutError",
    "PingStatus",
    "ResultView",
    "RolloutApp",
    "RolloutContext",
    "RunningRollout",
    "build_result_document",
    "read_result",
    "read_status",
]
