"""The ``a2a`` runtime through the hub, on AgentCore's A2A route of the local data plane.

The agent is served over A2A on loopback and registered on :class:`LocalAgentCore` as an
A2A runtime backed by a capacity provider; the hub's sessions reach it through the real
``bedrock-agentcore`` boto3 client (teardown) and signed JSON-RPC (the A2A route).
"""

from __future__ import annotations

import pytest
from rollhub.a2a.server import a2a_app
from rollhub.compat.agentcore_local import LocalAgentCore, runtime_arn
from rollhub.runtimes.agentcore import agentcore_session_id
from rollhub.sessions.episodes import SESSION_METRICS_KEY
from rollhub.testing import make_hub
from rollhub.testing.servers import serve_app

from tests.core.a2a.agents import math_app

ARN = runtime_arn("a2a_math")
PROVIDER = "arn:aws:bedrock-agentcore:us-west-2:123456789012:capacity-provider/pool_a-a1b2c3d4e5"
PHASES = {"setup_wait_s", "setup_s", "run_wait_s", "run_s", "shutdown_s"}


@pytest.fixture
def plane(monkeypatch, tmp_path):
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-2")
    with serve_app(a2a_app(math_app(tmp_path))) as agent_url:
        plane = LocalAgentCore()
        plane.add_runtime(ARN, agent_url, protocol="A2A", capacity_provider_arn=PROVIDER)
        with serve_app(plane) as url:
            yield plane, url


def _config(tmp_path, url, **sessions):
    return {
        "experiment": {"name": "a2a", "n_samples": 2, "concurrency": 4, "timeout_s": 60,
                       "progress": False},
        "runtime": {"name": "a2a", "target": "agentcore", "runtime_arn": ARN,
                    "capacity_provider_arn": PROVIDER, "endpoint_url": url},
        "store": {"url": f"file://{tmp_path / 'store'}"},
        "trainer": {"name": "export"},
        "sessions": {"setup_slots": 2, "run_slots": 1, **sessions},
    }  # fmt: skip


async def _groups(tmp_path, url, payloads, **sessions):
    hub = make_hub(_config(tmp_path, url, **sessions), run_dir=tmp_path / "run")
    async with hub:
        return [group async for group in hub.iter_groups(payloads)]


async def test_hub_runs_episodes_as_sessions_on_agentcores_a2a_route(plane, tmp_path):
    app, url = plane
    groups = await _groups(tmp_path, url, [{"id": "p1", "a": 2, "b": 3, "answer": 5},
                                           {"id": "p2", "a": 1, "b": 1, "answer": 3}])  # fmt: skip
    episodes = {e.session_id: e for g in groups for e in g.episodes}
    assert len(episodes) == 4 and all(e.status == "ok" for e in episodes.values())
    rewards = sorted(e.reward for e in episodes.values())
    assert rewards == [0.0, 0.0, 1.0, 1.0]
    for sid, episode in episodes.items():
        assert PHASES <= set(episode.metrics[SESSION_METRICS_KEY])
        assert episode.result["prepared"].startswith("workspace for")
        assert episode.result["types"]["a"] == "int"
        # each session was released through its capacity provider (under AgentCore's id:
        # rollhub's, lengthened to the 33 characters the service wants)
        released = (
            "DeleteCapacityProviderSession",
            PROVIDER.rsplit("/", 1)[1],
            agentcore_session_id(sid),
        )
        assert released in app.calls
    assert not app.sessions


async def test_a_teardown_error_is_kept_beside_the_result(plane, tmp_path):
    app, url = plane
    app.inject("DeleteCapacityProviderSession", "AccessDeniedException", 403, times=2)
    (group,) = await _groups(tmp_path, url, [{"id": "p1", "a": 2, "b": 3, "answer": 5}])
    assert [e.status for e in group.episodes] == ["ok", "ok"]
    assert [e.reward for e in group.episodes] == [1.0, 1.0]
    errors = [e.metrics[SESSION_METRICS_KEY].get("shutdown_error") for e in group.episodes]
    assert all("AccessDeniedException" in err for err in errors)


async def test_transient_errors_while_polling_are_retried(plane, tmp_path):
    app, url = plane
    app.inject("A2A:GetTask", "ServiceUnavailableException", 503, times=4)
    (group,) = await _groups(tmp_path, url, [{"id": "p1", "a": 2, "b": 3, "answer": 5}])
    assert [e.status for e in group.episodes] == ["ok", "ok"]
    assert not app._faults["A2A:GetTask"]  # every injected fault was met, and survived


async def test_a_failed_setup_is_a_submit_error_and_its_session_is_released(plane, tmp_path):
    app, url = plane
    (group,) = await _groups(
        tmp_path, url, [{"id": "p1", "a": 2, "b": 3, "answer": 5, "fail_setup": "broken image"}]
    )
    for episode in group.episodes:
        assert episode.status == "submit_error"
        assert "cannot prepare: broken image" in episode.error.message
        assert "run_s" not in episode.metrics[SESSION_METRICS_KEY]
    assert not app.sessions
