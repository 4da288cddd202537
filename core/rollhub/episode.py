"""Episodes and groups: what the pipeline hands to trainers.

An :class:`Episode` is one finished rollout: the agent's result, its reward, its terminal
status, timings and the exact token traces. A failed rollout is an episode too (failures
are data): its ``status`` says how it ended and ``error`` says why. A group is the n samples
of one prompt (GRPO).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from rollhub.trace import TraceRecord

__all__ = ["Episode", "EpisodeGroup", "ErrorInfo", "Status", "group_stats", "pass_at_k"]

#: Terminal status of a rollout. Exactly one per submitted rollout. ``store_error``: the
#: agent finished but its result could not be written to the result store (the error says
#: why). ``infra_error``: every session the rollout was given was lost to the
#: infrastructure (its worker or node died, the runtime lost it, no worker took it, its
#: token-capture session went with a gateway replica); not the agent's doing, so no failure
#: policy ever turns it into a reward.
Status = Literal[
    "ok", "agent_error", "timeout", "submit_error", "cancelled", "store_error", "infra_error"
]
TERMINAL_STATUSES: tuple[str, ...] = (
    "ok",
    "agent_error",
    "timeout",
    "submit_error",
    "cancelled",
    "store_error",
    "infra_error",
)


@dataclass(frozen=True)
class ErrorInfo:
    """Why a rollout failed: exception type, message and (when known) traceback."""

    type: str
    message: str
    traceback: str | None = None

    @classmethod
    def from_exception(cls, exc: BaseException) -> ErrorInfo:
        """Type name, message and formatted traceback of an exception."""
        import traceback

        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return cls(type(exc).__name__, str(exc), tb)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"type": self.type, "message": self.message, "traceback": self.traceback}


@dataclass
class Episode:
    """One finished rollout, ready for a trainer."""

    episode_id: str
    group_id: str
    session_id: str
    sample_index: int
    status: Status
    payload: dict[str, Any] = field(default_factory=dict)
    result: dict[str, Any] | None = None
    reward: float | None = None
    reward_components: dict[str, float] = field(default_factory=dict)
    error: ErrorInfo | None = None
    traces: list[TraceRecord] = field(default_factory=list)
    weight_version: int | None = None
    submitted_at: float | None = None
    finished_at: float | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    #: whether trainers should learn from this episode (set by the failure policy)
    trainable: bool = True

    @property
    def ok(self) -> bool:
        """True when the rollout ended with a stored success result."""
        return self.status == "ok"

    @property
    def infra_failed(self) -> bool:
        """True when the infrastructure, not the agent, ended the rollout (``infra_error``)."""
        return self.status == "infra_error"

    @property
    def elapsed(self) -> float | None:
        """Seconds from submission to the terminal result."""
        if self.submitted_at is None or self.finished_at is None:
            return None
        return self.finished_at - self.submitted_at

    @property
    def num_sampled_tokens(self) -> int:
        """Tokens the model sampled across all traces (mask 1)."""
        return sum(t.num_sampled for t in self.traces)

    @property
    def num_turns(self) -> int:
        """Model calls across all traces."""
        return sum(len(t.turns) for t in self.traces)

    @property
    def num_tool_call_turns(self) -> int:
        """Model calls that ended in a tool call (parsed by the gateway from the template's
        tool syntax)."""
        return sum(1 for t in self.traces for turn in t.turns if turn.finish_reason == "tool_calls")

    @property
    def num_masked_tokens(self) -> int:
        """Response tokens the model did not sample (tool results, template tails): the loss
        mask keeps them out of training."""
        return sum(len(t.response_ids) - t.num_sampled for t in self.traces)

    def solved(self, success_threshold: float = 1.0) -> bool:
        """Whether the task was solved: the result's boolean ``success`` when the agent
        reports one, else a reward of at least ``success_threshold`` (``[rewards]
        success_threshold``, the same bar pass@k uses)."""
        flag = (self.result or {}).get("success")
        if isinstance(flag, bool):
            return flag and self.ok
        return self.ok and self.reward is not None and self.reward >= success_threshold


@dataclass
class EpisodeGroup:
    """The samples of one prompt, in sample order."""

    group_id: str
    payload: dict[str, Any]
    episodes: list[Episode]
    #: what scoring the group together cost (``{"judge": {"calls": 1, "s": 0.8}}``)
    metrics: dict[str, Any] = field(default_factory=dict)
    #: why no episode of the group trains although some succeeded (set by the failure
    #: policy when infrastructure failures left the group too small); None: not dropped
    dropped: str | None = None

    @property
    def trainable_episodes(self) -> list[Episode]:
        """The episodes trainers should learn from, after the failure policy."""
        return [e for e in self.episodes if e.trainable]

    @property
    def rewards(self) -> list[float | None]:
        """Rewards per sample (None where the rollout failed)."""
        return [e.reward for e in self.episodes]

    @property
    def stats(self) -> dict[str, float | int | None]:
        """Mean, std and pass@k over the successful samples; see :func:`group_stats`."""
        return group_stats(self.episodes)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimate from n samples of which c are correct (Chen et al., 2021)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


def group_stats(
    episodes: list[Episode], *, success_threshold: float = 1.0
) -> dict[str, float | int | None]:
    """Group statistics, computed once in the core for every consumer.

    ``mean``/``std`` (population) over rewards of successful episodes, ``n_ok``,
    ``n_failed`` and ``pass@k`` for k = 1 and k = n, where an episode passes when its reward
    reaches ``success_threshold``.
    """
    rewards = [e.reward for e in episodes if e.ok and e.reward is not None]
    n = len(rewards)
    stats: dict[str, float | int | None] = {
        "n": len(episodes),
        "n_ok": sum(1 for e in episodes if e.ok),
        "n_failed": sum(1 for e in episodes if not e.ok),
        "mean": None,
        "std": None,
    }
    if n:
        mean = sum(rewards) / n
        stats["mean"] = mean
        stats["std"] = math.sqrt(sum((r - mean) ** 2 for r in rewards) / n)
        c = sum(1 for r in rewards if r >= success_threshold)
        stats["pass@1"] = pass_at_k(n, c, 1)
        stats[f"pass@{n}"] = pass_at_k(n, c, n)
    return stats
