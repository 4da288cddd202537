"""``[runtime]`` options of the ``ray`` runtime (:class:`~rollhub.runtimes.ray.RayRuntime`)."""

from __future__ import annotations

from pydantic import Field

from rollhub.runtime import RuntimeOptions

__all__ = ["RayRuntimeOptions"]


class RayRuntimeOptions(RuntimeOptions):
    """``[runtime]`` options of the ``ray`` runtime."""

    app: str = Field(description="the RolloutApp: 'path/to/agent.py:app' or 'pkg.module:app'")
    address: str | None = Field(
        None, description="Ray cluster address (None: RAY_ADDRESS, else the current or a new "
        "local one)"
    )  # fmt: skip
    actors: int = Field(2, ge=1, description="rollout actors")
    max_concurrency_per_actor: int = Field(64, ge=1, description="rollouts one actor runs at once")
    num_cpus_per_actor: float = Field(0.0, ge=0, description="CPUs Ray reserves per actor")
    resources: dict[str, float] = Field(
        default_factory=dict,
        description="custom resources each actor asks for: only nodes offering them take "
        "actors (e.g. {rollhub_worker = 0.001} keeps rollouts off the head)",
    )
    spread: bool = Field(
        True, description="start each actor on the eligible node with the fewest actors "
        "(false: Ray's own scheduler places them)"
    )  # fmt: skip
    start_timeout_s: float = Field(
        60.0, gt=0, description="how long one actor may take to start before another is tried"
    )
    head_timeout_s: float = Field(
        10.0, gt=0, description="seconds the cluster's head may not answer before the run "
        "stops with ClusterLost"
    )  # fmt: skip
    env: dict[str, str] = Field(
        default_factory=dict, description="environment variables of the actors"
    )
