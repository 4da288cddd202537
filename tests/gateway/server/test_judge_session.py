"""The judge's capture session is the judge's own: the per-session limits the rollouts run
under (``[token_source] policy``) never fail or cut the judge's calls.

A real in-process gateway with the scripted engine serves a rollout policy and a frozen
judge; the judge scores a group through the gateway token source, as in a run.
"""

from __future__ import annotations

import types
from collections.abc import AsyncIterator
from typing import Any

import pytest
from rollhub.episode import Episode, EpisodeGroup
from rollhub.judge.config import JudgeConfig
from rollhub.judge.plugin import rollhub_collect_group_rewards
from rollhub_gateway.config import GatewayConfig
from rollhub_gateway.http.serving import build_gateway
from rollhub_gateway.token_source import GatewaySourceOptions, GatewayTokenSource

EPISODES = 5  # more score-mode calls than the limits below allow one session


def _source(reply: list[int], limits: dict[str, Any]) -> GatewayTokenSource:
    config = GatewayConfig(
        # a little latency, so the judge's calls are in flight together
        engine={"name": "scripted", "options": {"reply": reply, "latency_s": 0.2}},
        log_turns=False,
        policy=limits,
        policies=[{"name": "proposer"}, {"name": "critic", "trainable": False}],
    )
    return GatewayTokenSource(GatewaySourceOptions(), gateway=build_gateway(config))


@pytest.fixture
def reply(ids: Any) -> list[int]:
    """What the judge's engine answers to every call: a score of 7."""
    return list(ids("Score: 7"))


@pytest.fixture
async def hub_for(reply: list[int]) -> AsyncIterator[Any]:
    """A hub view whose gateway runs the rollouts under the limits it is given."""
    sources: list[GatewayTokenSource] = []

    async def build(limits: dict[str, Any], mode: str) -> Any:
        source = _source(reply, limits)
        sources.append(source)
        await source.start()
        judge = JudgeConfig(policy="critic", mode=mode, max_tokens=16)  # type: ignore[arg-type]
        config = types.SimpleNamespace(judge=judge, experiment=types.SimpleNamespace(seed=1))
        return types.SimpleNamespace(config=config, token_source=source, run_dir=None)

    try:
        yield build
    finally:
        for source in sources:
            await source.close()


def _group() -> EpisodeGroup:
    episodes = [
        Episode(f"e{i}", "g", f"s{i}", i, "ok", result={"answer": i}, reward=0.0)
        for i in range(EPISODES)
    ]
    return EpisodeGroup("g", {"question": "Add 2 and 3."}, episodes)


@pytest.mark.parametrize(
    "limits",
    [
        {"max_turns": 3},  # score mode: one call per episode, all in the judge's session
        {"max_concurrent_requests": 2},  # the calls go out at once
        {"max_tokens_cap": 2},  # would cut "Score: 7" to "Score"
        {"max_context_tokens": 40},  # the judge's prompt is longer than a rollout's turn
        {"max_turns": 3, "max_concurrent_requests": 1, "max_tokens_cap": 2},
    ],
    ids=["max_turns", "concurrency", "max_tokens_cap", "max_context_tokens", "all"],
)
async def test_rollout_session_limits_do_not_reach_a_score_mode_judge(hub_for, limits):
    hub = await hub_for(limits, "score")
    group = _group()
    awaitable = rollhub_collect_group_rewards(group, hub)
    assert awaitable is not None
    rewards = await awaitable
    assert rewards == {e.episode_id: {"judge": 0.7} for e in group.episodes}
    assert group.metrics["judge"]["calls"] == EPISODES
    assert group.metrics["judge"]["unparsed"] == 0


async def test_rollouts_keep_their_limits_beside_the_judge(hub_for, ids):
    """Only the judge's session is lifted: a rollout's session still has the gateway's."""
    import openai

    hub = await hub_for({"max_turns": 1}, "score")
    capture = await hub.token_source.open_session("rollout-1")
    client = openai.AsyncOpenAI(base_url=capture.base_url, api_key=capture.api_key, max_retries=0)
    ask = [{"role": "user", "content": "Add 2 and 3."}]
    await client.chat.completions.create(model="proposer", messages=ask)
    with pytest.raises(openai.BadRequestError, match="max_turns"):
        await client.chat.completions.create(model="proposer", messages=ask)
    await hub.token_source.close_session("rollout-1", drop=True)
    group = _group()
    awaitable = rollhub_collect_group_rewards(group, hub)
    assert awaitable is not None
    assert len(await awaitable) == EPISODES
