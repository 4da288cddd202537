"""``[runtime]`` options of the ``local`` runtime
(:class:`~rollhub.runtimes.local.LocalRuntime`)."""

from __future__ import annotations

from pydantic import Field

from rollhub.runtime import RuntimeOptions

__all__ = ["LocalRuntimeOptions"]


class LocalRuntimeOptions(RuntimeOptions):
    """``[runtime]`` options of the ``local`` runtime."""

    # Optional here so that a config without a [runtime] section still checks; the runtime
    # itself refuses to be built without it.
    app: str | None = Field(
        None, description="the RolloutApp: 'path/to/agent.py:app' or 'pkg.module:app'"
    )
    workers: int = Field(2, ge=1, description="worker processes")
    max_concurrency_per_worker: int = Field(
        64, ge=1, description="sessions one worker runs at once"
    )
    startup_timeout_s: float = Field(
        30.0, gt=0, description="deadline for a worker to answer /ping"
    )
    ping_interval_s: float = Field(1.0, gt=0, description="seconds between liveness checks")
    env: dict[str, str] = Field(
        default_factory=dict, description="extra environment of the workers"
    )
