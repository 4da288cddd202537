"""Cross tests against agentcore-rl-toolkit 0.1.4's A2A sessions (its ``a2a`` extra), run in
its own environment, on AgentCore's A2A route of the local data plane: upstream's session
client drives a rollhub agent, and rollhub's ``a2a`` runtime drives an agent built on
upstream's executor. Then the five faults of upstream's package, shown against it, and
their absence in rollhub. (The same in podman containers: tests/deploy_image.)
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest
from rollhub.a2a.server import a2a_app
from rollhub.compat.agentcore_local import ENDPOINT_ENV, LocalAgentCore, runtime_arn
from rollhub.sessions.episodes import SESSION_METRICS_KEY
from rollhub.testing import make_hub
from rollhub.testing.servers import serve_app

from tests.compat.upstream_venv import upstream_python
from tests.core.a2a.agents import math_app

DRIVER = os.path.join(os.path.dirname(__file__), "upstream_a2a_driver.py")
ARN = runtime_arn("a2a_cross_014")
PROVIDER = "arn:aws:bedrock-agentcore:us-west-2:123456789012:capacity-provider/pool_x-a1b2c3d4e5"
PROVIDER_ID = PROVIDER.rsplit("/", 1)[1]


@pytest.fixture(scope="module")
def python014() -> str:
    return str(upstream_python())


@pytest.fixture
def a2a_plane(aws_env, monkeypatch, tmp_path) -> Iterator[tuple[LocalAgentCore, str]]:
    """The local data plane; its commands run upstream's session warm-up (echo hello)."""
    plane = LocalAgentCore(commands_dir=tmp_path)
    with serve_app(plane) as url:
        monkeypatch.setenv(ENDPOINT_ENV, url)
        yield plane, url


@pytest.fixture
def upstream_agent(python014, tmp_path) -> Iterator[str]:
    """The 0.1.4 executor agent, served by upstream's code in its own environment."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "MARKER_DIR": str(tmp_path)}
    proc = subprocess.Popen([python014, DRIVER, "agent", "127.0.0.1", str(port)], env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/ping", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "no 0.1.4 agent"
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _upstream(python014: str, mode: str, *args: str, tasks: list) -> list[dict]:
    done = subprocess.run(
        [python014, DRIVER, mode, *args], input=json.dumps(tasks), capture_output=True,
        text=True, timeout=240, env=dict(os.environ),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


async def _rollhub_groups(tmp_path, url, payloads, n=1):
    config = {
        "experiment": {"name": "x014", "n_samples": n, "concurrency": 4, "timeout_s": 60,
                       "progress": False},
        "runtime": {"name": "a2a", "target": "agentcore", "runtime_arn": ARN,
                    "capacity_provider_arn": PROVIDER, "endpoint_url": url},
        "store": {"url": f"file://{tmp_path / 'store'}"},
        "trainer": {"name": "export"},
    }  # fmt: skip
    async with make_hub(config, run_dir=tmp_path / "run") as hub:
        return [g async for g in hub.iter_groups(payloads)]


# Both directions --------------------------------------------------------------------------


def test_014_session_client_drives_a_rollhub_agent(python014, a2a_plane, tmp_path):
    plane, _ = a2a_plane
    with serve_app(a2a_app(math_app(tmp_path))) as agent_url:
        plane.add_runtime(ARN, agent_url, protocol="A2A", capacity_provider_arn=PROVIDER)
        tasks = [
            {"id": "p1", "a": 2, "b": 3, "answer": 5},
            {"id": "p2", "a": 1, "b": 1, "answer": 3},
        ]
        out = _upstream(python014, "agentcore", ARN, PROVIDER, tasks=tasks)
    assert [o.get("error") for o in out] == [None, None]
    assert [o["dump"]["reward"] for o in out] == [1.0, 0.0] and all(o["successful"] for o in out)
    assert out[0]["dump"]["task_output"]["prepared"] == "workspace for 2.0+3.0"
    for o in out:  # upstream warmed the session up, ran it and released it
        ops = [c[0] for c in plane.calls if c[2] == o["session_id"]]
        assert ops[0] == "InvokeAgentRuntimeCommand" and ops[-1] == "DeleteCapacityProviderSession"


async def test_rollhub_a2a_runtime_drives_a_014_executor_agent(a2a_plane, upstream_agent, tmp_path):
    plane, url = a2a_plane
    plane.add_runtime(ARN, upstream_agent, protocol="A2A", capacity_provider_arn=PROVIDER)
    (group,) = await _rollhub_groups(
        tmp_path, url, [{"id": "p1", "a": 2, "b": 3, "answer": 5}], n=2
    )
    assert [e.status for e in group.episodes] == ["ok", "ok"]
    assert [e.reward for e in group.episodes] == [1.0, 1.0]
    assert group.episodes[0].result["prepared"] == "workspace for 2.0"  # upstream's Struct
    assert {"setup_s", "run_s", "shutdown_s"} <= set(group.episodes[0].metrics[SESSION_METRICS_KEY])
    assert sum(c[0] == "DeleteCapacityProviderSession" for c in plane.calls) == 2


# The five faults: shown against 0.1.4, absent in rollhub -----------------------------------


async def test_fault_a_transient_poll_error_fails_014_and_is_retried_by_rollhub(
    python014, a2a_plane, tmp_path
):
    plane, url = a2a_plane
    with serve_app(a2a_app(math_app(tmp_path))) as agent_url:
        plane.add_runtime(ARN, agent_url, protocol="A2A", capacity_provider_arn=PROVIDER)
        plane.inject("A2A:GetTask", "ServiceUnavailableException", 503)
        (out,) = _upstream(python014, "agentcore", ARN, PROVIDER,
                           tasks=[{"id": "p1", "a": 2, "b": 3, "answer": 5}])  # fmt: skip
        assert out["error"] == "RolloutA2AError" and "503" in out["message"]
        plane.inject("A2A:GetTask", "ServiceUnavailableException", 503, times=3)
        (group,) = await _rollhub_groups(tmp_path, url, [{"id": "p1", "a": 2, "b": 3, "answer": 5}])
    assert group.episodes[0].status == "ok"


async def test_fault_a_teardown_error_replaces_014s_result_not_rollhubs(
    python014, a2a_plane, tmp_path
):
    plane, url = a2a_plane
    with serve_app(a2a_app(math_app(tmp_path))) as agent_url:
        plane.add_runtime(ARN, agent_url, protocol="A2A", capacity_provider_arn=PROVIDER)
        plane.inject("DeleteCapacityProviderSession", "AccessDeniedException", 403)
        (out,) = _upstream(python014, "agentcore", ARN, PROVIDER,
                           tasks=[{"id": "p1", "a": 2, "b": 3, "answer": 5}])  # fmt: skip
        assert out["error"] == "AccessDeniedException"  # the finished rollout's dump is lost
        plane.inject("DeleteCapacityProviderSession", "AccessDeniedException", 403)
        (group,) = await _rollhub_groups(tmp_path, url, [{"id": "p1", "a": 2, "b": 3, "answer": 5}])
    episode = group.episodes[0]
    assert episode.status == "ok" and episode.reward == 1.0
    assert "AccessDeniedException" in episode.metrics[SESSION_METRICS_KEY]["shutdown_error"]


async def test_fault_numbers_lose_their_type_in_014_not_in_rollhub(python014, a2a_plane, tmp_path):
    plane, url = a2a_plane
    task = {"id": "p1", "a": 2, "b": 3, "answer": 5, "big": 2**60 + 1}
    with serve_app(a2a_app(math_app(tmp_path))) as agent_url:
        plane.add_runtime(ARN, agent_url, protocol="A2A", capacity_provider_arn=PROVIDER)
        (out,) = _upstream(python014, "agentcore", ARN, PROVIDER, tasks=[task])
        (group,) = await _rollhub_groups(tmp_path, url, [task])
    seen_upstream = out["dump"]["task_output"]
    assert seen_upstream["types"]["a"] == "float" and seen_upstream["big"] != 2**60 + 1
    seen_rollhub = group.episodes[0].result
    assert seen_rollhub["types"]["a"] == "int" and seen_rollhub["big"] == 2**60 + 1


def test_fault_a_nan_reward_passes_014_and_is_refused_by_rollhub(python014):
    """0.1.4 takes a NaN reward as a successful dump, from an agent's dump and from an S3
    result alike (over A2A its server then fails to serialize it: an opaque JSON-RPC
    -32603 instead of the reason). rollhub refuses it where it is made, naming the field."""
    probe = (
        "import json, math\n"
        "from agentcore_rl_toolkit.rollout_session.wire import RolloutDumpResponse\n"
        "from agentcore_rl_toolkit.rollout_session.agentcore_s3_session import to_dump\n"
        "a = RolloutDumpResponse(task_output={}, reward=math.nan, exception=None)\n"
        "b = to_dump({'rewards': math.nan})\n"
        "print(json.dumps([repr(a.reward), a.is_successful(), repr(b.reward), b.is_successful()]))"
    )
    done = subprocess.run([python014, "-c", probe], capture_output=True, text=True, timeout=60,
                          env={"AWS_DEFAULT_REGION": "us-west-2", "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert json.loads(done.stdout) == ["nan", True, "nan", True], done.stderr[-2000:]

    import math

    from rollhub.compat import RolloutContractError, RolloutDumpResponse
    from rollhub.compat.s3_session import to_dump

    with pytest.raises(ValueError, match="reward=nan is not finite"):
        RolloutDumpResponse(task_output={}, reward=math.nan, exception=None)
    with pytest.raises(RolloutContractError, match="rewards=nan is not finite"):
        to_dump({"rewards": math.nan})


def test_fault_cancel_leaves_014s_work_running(python014, upstream_agent, tmp_path):
    """Upstream's executor reports the task canceled and /ping idle, but its rollout runs on
    to the end (rollhub: tests/core/a2a/test_a2a_session.py, the work stops)."""
    import asyncio

    from rollhub.a2a.client import A2ATaskClient, build_a2a_client

    async def cancel_midway() -> str:
        task = {"id": "slow", "a": 1, "b": 1, "answer": 2, "sleep": 2}
        async with httpx.AsyncClient() as http:
            client = A2ATaskClient(build_a2a_client(http, upstream_agent + "/"), "session-cancel")
            await client.setup(task)
            running = asyncio.ensure_future(client.run(task))
            await asyncio.sleep(0.5)
            await client.cancel()
            dump = await running
            return (await http.get(f"{upstream_agent}/ping")).json()["status"], dump

    status, dump = asyncio.run(cancel_midway())
    assert status == "Healthy" and "CANCELED" in dump.error.message
    deadline = time.monotonic() + 10
    while not (tmp_path / "slow.done").exists():
        assert time.monotonic() < deadline, "the cancelled work did not run on"
        time.sleep(0.1)
