"""Default implementations of the pipeline hooks (submission, token retrieval, rewards).

Each is ``trylast`` (firstresult hooks) or runs like any other implementation (all-results
hooks), so a plugin overrides or extends them without touching the core.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING

from rollhub.errors import AgentRewardError
from rollhub.plugin_host.markers import hookimpl

if TYPE_CHECKING:
    from rollhub.episode import Episode
    from rollhub.rollout import RolloutRequest, SubmitReceipt
    from rollhub.runtime import Runtime
    from rollhub.tokens import TokenSource
    from rollhub.trace import TraceRecord


@hookimpl(trylast=True)
def rollhub_submit_rollout(request: RolloutRequest, runtime: Runtime) -> Awaitable[SubmitReceipt]:
    return runtime.submit(request)


@hookimpl(trylast=True)
def rollhub_retrieve_tokens(episode: Episode, source: TokenSource) -> Awaitable[list[TraceRecord]]:
    return source.fetch_traces(episode.session_id)


@hookimpl
def rollhub_collect_rewards(episode: Episode) -> Mapping[str, float] | None:
    """``{"result": r}`` from the agent's ``rewards`` (last element of a list); a mapping
    of names to numbers gives one component each (``{"solved": 1, "verdict": 0}``: what
    ``[[policies]] reward_key`` names)."""
    result = episode.result or {}
    if "rewards" not in result:
        return None
    value = result["rewards"]
    if isinstance(value, Mapping):
        if not value:
            raise AgentRewardError("result 'rewards' is an empty mapping; name at least one reward")
        return {str(name): reward_from_result(v) for name, v in value.items()}
    return {"result": reward_from_result(value)}


def reward_from_result(value: object) -> float:
    """The scalar reward of a result's ``rewards`` field: a number or a list of numbers."""
    if isinstance(value, list):
        if not value:
            raise AgentRewardError("result 'rewards' is an empty list; return a number or a non-empty list")
        value = value[-1]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise AgentRewardError(f"result 'rewards' must be a number or a list of numbers, got {value!r}")
    if not math.isfinite(value):
        raise AgentRewardError(f"result 'rewards' is not finite: {value!r}")
    return float(value)
