"""The judge as a reward hook: each finished group's ``ok`` episodes scored by a frozen model.

Per group (``rollhub_collect_group_rewards``):

- the judge is reached either through the run's gateway, as a frozen ``[[policies]]``
  entry (a capture session of its own: its calls are recorded by the gateway with the
  judge's policy name and version, never part of an episode, never trained, under none of
  the rollouts' per-session limits), or at any OpenAI-compatible endpoint;
- ``rank`` mode asks once for the whole group (RULER-style: every attempt scored against
  the others), ``score`` mode once per episode (:mod:`rollhub.judge.prompt`);
- each ``ok`` episode gets the component ``[judge] name`` = score / scale in [0, 1] (an
  attempt the reply scores unreadably gets 0 and is counted in ``unparsed``), and
  ``episode.metrics["judge"]`` its score;
- every call is appended to ``judge.jsonl`` in the run directory (the prompt, the reply,
  the scores, the tokens, the seconds, and the gateway's records of the call: policy and
  weight version), and ``group.metrics["judge"]`` holds what the group cost (calls,
  prompt and completion tokens, seconds, unparsed scores), which the loop sums per step.

A judge that cannot be reached fails the group's reward (see :mod:`rollhub.scoring.group_rewards`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import uuid
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from rollhub.errors import ConfigError, RewardError
from rollhub.judge.config import JudgeConfig
from rollhub.judge.prompt import (
    attempt_text,
    parse_rank,
    parse_score,
    rank_messages,
    score_messages,
    task_text,
)
from rollhub.plugin_host.markers import hookimpl
from rollhub.seeding import episode_seed

if TYPE_CHECKING:
    from rollhub.config import RollhubConfig
    from rollhub.episode import EpisodeGroup
    from rollhub.hubs.view import HubView
    from rollhub.tokens import TokenSource

__all__ = ["JUDGE_LOG", "rollhub_check_config", "rollhub_collect_group_rewards"]

log = logging.getLogger(__name__)

#: the run directory's log of judge calls
JUDGE_LOG = "judge.jsonl"


@hookimpl
def rollhub_check_config(config: RollhubConfig) -> None:
    """A judging policy exists, is frozen and is served by the gateway; an endpoint's key
    variable is set."""
    judge: JudgeConfig | None = getattr(config, "judge", None)
    if judge is None:
        return
    if judge.policy is not None:
        policies = {p.name: p for p in config.policies}
        if judge.policy not in policies:
            raise ConfigError(
                f"judge.policy = {judge.policy!r} is not a [[policies]] entry; policies: "
                f"{', '.join(policies) or 'none'} (add a frozen one, or judge at base_url)",
                field="judge.policy",
            )
        if policies[judge.policy].trainable:
            raise ConfigError(
                f"judge.policy = {judge.policy!r} is trainable, but a judge is never trained: "
                f"set trainable = false on that [[policies]] entry",
                field="judge.policy",
            )
        if config.token_source.name != "gateway":
            raise ConfigError(
                f"judge.policy needs the gateway to serve it; token_source is "
                f"{config.token_source.name!r} (use token_source 'gateway', or judge at base_url)",
                field="judge.policy",
            )
    elif judge.api_key_env and not os.environ.get(judge.api_key_env):
        raise ConfigError(
            f"judge.api_key_env = {judge.api_key_env!r}, but that environment variable is not "
            f"set; export it or drop api_key_env",
            field="judge.api_key_env",
        )


@hookimpl
def rollhub_collect_group_rewards(
    group: EpisodeGroup, hub: HubView
) -> Awaitable[dict[str, dict[str, float]]] | None:
    """Score the group's ``ok`` episodes with the configured judge (none: decline)."""
    judge: JudgeConfig | None = getattr(hub.config, "judge", None)
    if judge is None or not any(e.ok for e in group.episodes):
        return None
    return _judge_group(judge, group, hub)


async def _judge_group(
    judge: JudgeConfig, group: EpisodeGroup, hub: HubView
) -> dict[str, dict[str, float]]:
    episodes = [e for e in group.episodes if e.ok]
    task = task_text(group.payload, judge.task_field)
    attempts = [attempt_text(e.result, judge.answer_field, judge.max_chars) for e in episodes]
    calls: list[tuple[list[int], list[dict[str, str]]]]
    if judge.mode == "rank":
        calls = [
            (list(range(len(episodes))), rank_messages(task, attempts, judge.rubric, judge.scale))
        ]
    else:
        calls = [
            ([i], score_messages(task, a, judge.rubric, judge.scale))
            for i, a in enumerate(attempts)
        ]
    endpoint = await _Endpoint.open(judge, group, hub, len(calls))
    cost = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "s": 0.0, "unparsed": 0}
    scores: list[float | None] = [None] * len(episodes)
    try:
        replies = await asyncio.gather(*(endpoint.chat(m) for _, m in calls))
        records = await endpoint.records()
    finally:
        await endpoint.close()
    rows: list[dict[str, object]] = []
    for (indices, messages), (reply, usage, seconds) in zip(calls, replies, strict=True):
        got = (
            parse_rank(reply, len(indices), judge.scale)
            if judge.mode == "rank"
            else [parse_score(reply, judge.scale)]
        )
        for i, score in zip(indices, got, strict=True):
            scores[i] = score
        cost["calls"] += 1
        cost["prompt_tokens"] += int(usage.get("prompt_tokens") or 0)
        cost["completion_tokens"] += int(usage.get("completion_tokens") or 0)
        cost["s"] = round(cost["s"] + seconds, 3)
        rows.append(
            {
                "group_id": group.group_id,
                "episodes": [episodes[i].episode_id for i in indices],
                "mode": judge.mode,
                "model": endpoint.model,
                "session_id": endpoint.session_id,
                "prompt": messages[-1]["content"],
                "reply": reply,
                "scores": [scores[i] for i in indices],
                "usage": usage,
                "s": round(seconds, 3),
            }
        )
    cost["unparsed"] = sum(s is None for s in scores)
    if rows and records is not None:
        rows[-1]["records"] = records
    _append_log(hub, rows)
    group.metrics["judge"] = cost
    out = {}
    for e, score in zip(episodes, scores, strict=True):
        e.metrics["judge"] = {"score": score, "model": endpoint.model}
        out[e.episode_id] = {judge.name: score if score is not None else 0.0}
    return out


class _Endpoint:
    """Where one group's judge calls go: a gateway session of the judging policy, or an
    OpenAI-compatible endpoint."""

    def __init__(
        self,
        judge: JudgeConfig,
        base_url: str,
        model: str,
        key: str | None,
        source: TokenSource | None = None,
        session_id: str | None = None,
    ) -> None:
        import httpx

        self.judge, self.model, self.source, self.session_id = judge, model, source, session_id
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.http = httpx.AsyncClient(
            base_url=base_url.rstrip("/") + "/", headers=headers, timeout=judge.timeout_s
        )

    @classmethod
    async def open(
        cls, judge: JudgeConfig, group: EpisodeGroup, hub: HubView, calls: int
    ) -> _Endpoint:
        """The endpoint of one group's ``calls`` judge calls (sent all at once)."""
        if judge.policy is None:
            key = os.environ.get(judge.api_key_env) if judge.api_key_env else None
            assert judge.base_url is not None and judge.model is not None  # the config says so
            return cls(judge, judge.base_url, judge.model, key)
        sid = f"judge-{uuid.uuid4().hex[:12]}"
        seed = episode_seed(hub.config.experiment.seed, f"judge:{group.group_id}", 0)
        capture = await hub.token_source.open_session(
            sid, sampling=_session_policy(judge, seed, calls)
        )
        model = capture.models.get(judge.policy)
        if model is None or capture.base_url is None:
            await hub.token_source.close_session(sid, drop=True)
            raise RewardError(
                f"the token source does not serve policy {judge.policy!r} "
                f"(judge.policy); it serves: {sorted(capture.models)}"
            )
        return cls(judge, capture.base_url, model, capture.api_key, hub.token_source, sid)

    async def chat(self, messages: list[dict[str, str]]) -> tuple[str, dict[str, Any], float]:
        """``(reply, usage, seconds)`` of one judge call."""
        import httpx

        body = {
            "model": self.model,
            "messages": messages,
            "max_tokens": self.judge.max_tokens,
            "temperature": self.judge.temperature,
        }
        t0 = time.monotonic()
        try:
            resp = await self.http.post("chat/completions", json=body)
            resp.raise_for_status()
            data = resp.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise RewardError(
                f"judge {self.model!r} at {self.http.base_url} failed: {type(exc).__name__}: {exc}"
            ) from exc
        reply = ((data.get("choices") or [{}])[0].get("message") or {}).get("content") or ""
        return reply, dict(data.get("usage") or {}), time.monotonic() - t0

    async def records(self) -> list[dict[str, Any]] | None:
        """What the gateway recorded of the judge's calls (policy, versions, tokens)."""
        if self.source is None or self.session_id is None:
            return None
        traces = await self.source.fetch_traces(self.session_id)
        return [
            {
                "policy": t.policy,
                "weight_versions": t.weight_versions,
                "sampled_tokens": t.num_sampled,
            }
            for t in traces
        ]

    async def close(self) -> None:
        await self.http.aclose()
        if self.source is not None and self.session_id is not None:
            await self.source.close_session(self.session_id)


def _session_policy(judge: JudgeConfig, seed: int, calls: int) -> dict[str, Any]:
    """The judge's capture session policy: every field set, so none of the gateway's
    default policy (the rollouts' ``[token_source] policy``) reaches it.

    The rollouts' limits are per episode; the judge's session holds a whole group's calls
    (one per episode in score mode, all in flight together), so a rollout's ``max_turns``
    or ``max_concurrent_requests`` would fail the group and a rollout's ``max_tokens_cap``
    or ``max_context_tokens`` would cut the judge's prompt or reply. Its sampling is the
    judge's alone: ``temperature``, ``max_tokens`` and the group's seed, nucleus and top-k
    off, nothing pinned (the judge sends the same values in every call).
    """
    return {
        "temperature": judge.temperature,
        "max_tokens": judge.max_tokens,
        "seed": seed,
        "top_p": 1.0,
        "top_k": -1,
        "pinned": [],
        "max_turns": None,
        "max_tokens_cap": None,
        "max_context_tokens": None,
        "max_concurrent_requests": max(1, calls),
    }


def _append_log(hub: HubView, rows: list[dict[str, object]]) -> None:
    run_dir = getattr(hub, "run_dir", None)
    if run_dir is None or not rows:
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / JUDGE_LOG, "a", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
