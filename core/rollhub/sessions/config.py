"""The ``[sessions]`` table: how the hub bounds rollouts that run as sessions.

Setup and run are bounded apart: a container slot is held from setup to teardown, a run
slot only while the agent runs, so containers can be prepared while others run. Both
are granted to earlier groups first (group priority), so a step's groups finish in the
order they were started instead of all finishing late together.

.. code-block:: toml

    [sessions]
    setup_slots = 8          # sessions set up or held at once (containers alive)
    run_slots = 4            # agents running at once
    setup_timeout_s = 300    # starting a container, preparing the task
    run_timeout_s = 900      # the agent's run (default: [experiment] timeout_s)
    sessions_per_s = 2.0     # creation rate (default: unlimited)
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["SessionsConfig"]


class SessionsConfig(BaseModel):
    """Bounds of session rollouts (used only when the runtime offers sessions)."""

    model_config = ConfigDict(extra="forbid")

    setup_slots: int | None = Field(
        None,
        ge=1,
        description="sessions alive at once, from setup to teardown "
        "(default: [experiment] concurrency)",
    )
    run_slots: int | None = Field(
        None, ge=1, description="agents running at once (default: setup_slots)"
    )
    setup_timeout_s: float = Field(600.0, gt=0, description="limit of one session's setup")
    run_timeout_s: float | None = Field(
        None, gt=0, description="limit of one run (default: [experiment] timeout_s)"
    )
    shutdown_timeout_s: float = Field(60.0, gt=0, description="limit of one teardown")
    sessions_per_s: float | None = Field(
        None, gt=0, description="sessions created per second at most (default: unlimited)"
    )
    keepalive_s: float = Field(
        60.0,
        gt=0,
        description="how often a session queued for a run slot tells its runtime it is still "
        "there (an A2A server evicts a parked task untouched for its idle bound, 1 h by "
        "default: keep this well under the server's --parked-idle-s)",
    )
