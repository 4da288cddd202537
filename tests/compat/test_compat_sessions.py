"""rollhub.compat's rollout sessions: upstream's names and contract, rollhub's behaviour.

An executor written against upstream's ``RolloutAgentExecutor`` is served with
bedrock-agentcore's ``build_a2a_app`` (as upstream's agents serve) and driven by the compat
sessions: over loopback, and through AgentCore's A2A route on the local data plane with a
capacity provider, under ``run_rollout_with_bounds``.
"""

from __future__ import annotations

import asyncio
import math
import threading

import httpx
import pytest
from bedrock_agentcore.runtime.a2a import build_a2a_app
from rollhub.compat import (
    A2ARolloutSession,
    LocalPriorityAssigner,
    LocalPrioritySemaphore,
    LocalRateLimiter,
    NullPersister,
    PersistentDict,
    RolloutAgentExecutor,
    RolloutDumpResponse,
    RolloutSessionBounds,
    make_ping_handler,
    make_session,
    run_rollout_with_bounds,
)
from rollhub.compat.a2a_sessions import build_a2a_client
from rollhub.compat.agentcore_local import runtime_arn
from rollhub.errors import ConfigError
from rollhub.testing.servers import serve_app

ARN = runtime_arn("compat_a2a")
PROVIDER = "arn:aws:bedrock-agentcore:us-west-2:123456789012:capacity-provider/pool_c-a1b2c3d4e5"
SID = "compat-" + "0" * 32


class MathExecutor(RolloutAgentExecutor):
    """An agent as upstream's users write one: blocking hooks, a dump back."""

    def __init__(self) -> None:
        super().__init__()
        self.setups: list[dict] = []
        self.release = threading.Event()
        self.cleaned = False

    def run_setup(self, task_input):
        self.setups.append(task_input)

    def run_rollout(self, task_input):
        if task_input.get("block"):
            self.release.wait(20)
        if task_input.get("nan"):  # refused where the dump is made
            return RolloutDumpResponse(task_output={}, reward=math.nan, exception=None)
        total = task_input["a"] + task_input["b"]
        return RolloutDumpResponse(
            task_output={"sum": total, "type": type(task_input["a"]).__name__},
            reward=float(total == task_input["answer"]), exception=None, metrics={"turns": 1},
        )  # fmt: skip

    def cleanup(self):
        self.cleaned = True
        self.release.set()


class LoopbackSession(A2ARolloutSession):
    """Upstream's documented way to add a transport: subclass and give ``_client``."""

    def __init__(self, session_id, state, url):
        super().__init__(session_id, state)
        self._http = httpx.AsyncClient()
        self._url = url

    async def _client(self):
        return build_a2a_client(self._http, self._url)

    async def shutdown(self):
        await self._cancel_if_unfinished()
        await self._http.aclose()


@pytest.fixture
def executor_url():
    executor = MathExecutor()
    with serve_app(build_a2a_app(executor, ping_handler=make_ping_handler(executor))) as url:
        yield executor, url


def _state():
    return PersistentDict(persister=NullPersister())


def _bounds(**kw):
    return RolloutSessionBounds(
        container_semaphore=LocalPrioritySemaphore(2), rollout_semaphore=LocalPrioritySemaphore(1),
        container_priority_assigner=LocalPriorityAssigner(),
        rollout_priority_assigner=LocalPriorityAssigner(),
        container_setup_timeout=30, agent_run_timeout=30, **kw,
    )  # fmt: skip


async def test_an_upstream_style_executor_runs_under_the_bounds(executor_url):
    executor, url = executor_url
    state = _state()
    session = LoopbackSession(SID, state, url + "/")
    bounds = _bounds(session_rate_limiter=LocalRateLimiter(50))
    dump = await run_rollout_with_bounds(
        state, bounds, "group-1", session, {"a": 2, "b": 3, "answer": 5}
    )
    assert dump.is_successful() and dump.reward == 1.0
    assert dump.task_output == {"sum": 5, "type": "int"}  # as the agent made it: ints stay ints
    assert executor.setups == [{"a": 2, "b": 3, "answer": 5}]
    assert {"container_setup", "agent_run", "rate_limit_wait", "a2a_task_id"} <= set(state)
    assert state["agent_run_timeout_exceeded"] == 0.0


async def test_a_nan_reward_from_the_agent_is_refused(executor_url):
    _, url = executor_url
    state = _state()
    async with LoopbackSession(SID, state, url + "/") as session:
        await session.setup({"a": 1, "b": 1, "answer": 2, "nan": True})
        dump = await session.run({"a": 1, "b": 1, "answer": 2, "nan": True})
    assert not dump.is_successful() and "reward=nan is not finite" in dump.exception
    with pytest.raises(ValueError, match="not finite"):
        RolloutDumpResponse(task_output={}, reward=math.inf, exception=None)


async def test_cancel_runs_cleanup_and_ping_goes_idle(executor_url):
    executor, url = executor_url
    session = LoopbackSession(SID, _state(), url + "/")
    await session.setup({"a": 1, "b": 1, "answer": 2, "block": True})
    run = asyncio.ensure_future(session.run({"a": 1, "b": 1, "answer": 2, "block": True}))
    async with httpx.AsyncClient() as http:
        for _ in range(200):
            if (await http.get(f"{url}/ping")).json()["status"] == "HealthyBusy":
                break
            await asyncio.sleep(0.02)
        run.cancel()
        await session.shutdown()  # the task is unfinished: shutdown cancels it
        status = (await http.get(f"{url}/ping")).json()["status"]
    assert executor.cleaned and status == "Healthy"


def test_make_session_names_what_is_missing():
    with pytest.raises(ConfigError, match="capacity_provider_arn"):
        make_session(SID, {"backend": "agentcore_a2a", "agentcore_runtime_arn": ARN}, _state())
    with pytest.raises(ValueError, match=r"unknown rollout_session_backend\.backend='k8s'"):
        make_session(SID, {"backend": "k8s"}, _state())
    session = make_session(SID, {"backend": "docker_a2a", "agent_image_uri": "img",
                                 "docker_iam_role_arn": "", "docker_log_group": "g",
                                 "docker_log_region": "us-west-2"}, _state())  # fmt: skip
    assert type(session).__name__ == "DockerA2ASession" and session.agent_image_uri == "img"


async def test_agentcore_a2a_session_on_the_local_plane_keeps_its_result_over_a_teardown_error(
    plane, executor_url
):
    _, url = executor_url
    plane.app.add_runtime(ARN, url, protocol="A2A", capacity_provider_arn=PROVIDER)
    cfg = {
        "backend": "agentcore_a2a",
        "agentcore_runtime_arn": ARN,
        "capacity_provider_arn": PROVIDER,
    }
    state = _state()
    ok = await run_rollout_with_bounds(state, _bounds(), "g", make_session(SID, cfg, state),
                                       {"a": 2, "b": 2, "answer": 4})  # fmt: skip
    assert ok.reward == 1.0
    assert ("DeleteCapacityProviderSession", PROVIDER.rsplit("/", 1)[1], SID) in plane.app.calls
    plane.app.inject("DeleteCapacityProviderSession", "AccessDeniedException", 403)
    state = _state()
    kept = await run_rollout_with_bounds(state, _bounds(), "g", make_session(SID + "1", cfg, state),
                                         {"a": 2, "b": 2, "answer": 4})  # fmt: skip
    assert kept.reward == 1.0 and "AccessDeniedException" in state["shutdown_error"]


async def test_agentcore_s3_session_runs_an_s3_contract_agent(aws_env, monkeypatch, tmp_path):
    """make_session("agentcore_s3"): warm-up command, one invocation, the result from S3."""
    from rollhub.compat.agentcore_local import ENDPOINT_ENV, LocalAgentCore

    from tests.compat import rollhub_math_app
    from tests.compat.loopback_aws import BUCKET

    arn = runtime_arn("compat_s3_session")
    plane = LocalAgentCore(commands_dir=tmp_path)
    with serve_app(plane) as plane_url, serve_app(rollhub_math_app.make_app()) as agent_url:
        monkeypatch.setenv(ENDPOINT_ENV, plane_url)
        plane.add_runtime(arn, agent_url)
        cfg = {"backend": "agentcore_s3", "agentcore_runtime_arn": arn,
               "rollout_output_s3": f"s3://{BUCKET}", "experiment_name": "s3-session"}  # fmt: skip
        task = {"payload": {"a": 2, "b": 3, "answer": 5}, "group_id": "g1",
                "llm": {"base_url": "http://127.0.0.1:9/v1", "model": "openai/qwen", "api_key": "k"}}  # fmt: skip
        state = _state()
        dump = await run_rollout_with_bounds(
            state, _bounds(), "g1", make_session(SID, cfg, state), task
        )
    assert dump.is_successful() and dump.reward == 1.0
    assert dump.task_output["model_seen"] == "qwen"  # upstream's `openai/<name>` → the name
    # (a prefix in rollout_output_s3 would be folded into exp_id with a '/', which rollhub's
    # app refuses as a key part: see the migration guide)
    assert state["result_key"] == f"s3-session/g1/{SID}.json"
    assert [c[0] for c in plane.calls] == ["InvokeAgentRuntimeCommand", "InvokeAgentRuntime",
                                           "StopRuntimeSession"]  # fmt: skip
