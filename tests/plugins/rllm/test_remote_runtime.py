"""rLLM's remote-runtime protocol served by rollhub: real local workers, a real file store,
and a real rllm-model-gateway session URL as the agent's model endpoint."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import sys
import types
from pathlib import Path
from typing import Any, ClassVar

import pytest
from rollhub import hookimpl
from rollhub.client import RolloutOutcome
from rollhub.episode import ErrorInfo
from rollhub.errors import ConfigError, UsageError
from rollhub.registry import ComponentContext
from rollhub.runtimes.local import LocalRuntime
from rollhub.testing import make_host
from rollhub_rllm import contract
from rollhub_rllm.gateway_process import GatewayProcess, GatewaySettings
from rollhub_rllm.protocol import RemoteTaskResult, TaskSubmission, TerminationReason
from rollhub_rllm.remote_runtime import RollhubRemoteRuntime, install, task_result
from rollhub_rllm.traces import stitch

from tests.plugins.rllm.rllm_source import MODEL

AGENT = Path(__file__).parent / "agents" / "tool_agent.py"


def runtime_config(tmp_path: Path, workers: int = 2) -> dict:
    return {
        "experiment": {"name": "rllm-remote", "progress": False},
        "runtime": {"name": "local", "app": f"{AGENT}:app", "workers": workers},
        "store": {"url": f"file://{tmp_path / 'store'}"},
    }


def submission(sid: str, task: dict, task_id: str = "q1", url: str = "http://127.0.0.1:9/v1"):
    return TaskSubmission(task=task, session_id=sid, task_id=task_id, inference_url=url)


@pytest.fixture
def remote(tmp_path):
    rt = RollhubRemoteRuntime(
        runtime_config(tmp_path), exp_id="exp-1", model_id=MODEL, session_timeout=30,
        host=make_host(),
    )  # fmt: skip
    rt.initialize()
    try:
        yield rt
    finally:
        rt.shutdown()


def test_one_result_per_submission_for_ok_failing_hanging_and_killed_agents(remote):
    subs = [
        submission("s-ok", {"mode": "echo"}, task_id="group/with a slash"),
        submission("s-fail", {"mode": "fail", "id": "f"}),
        submission("s-hang", {"mode": "hang"}),
        submission("s-ok", {"mode": "echo"}),  # the same session twice
    ]
    results = asyncio.run(remote.execute_tasks(subs, timeout=3))
    assert [r.session_id for r in results] == ["s-ok", "s-fail", "s-hang", "s-ok"]
    assert [r.task_id for r in results] == ["group/with a slash", "q1", "q1", "q1"]
    assert all(isinstance(r, RemoteTaskResult) for r in results)
    ok, fail, hang, dup = results
    assert (ok.finished, ok.termination_reason, ok.reward) == (
        True,
        TerminationReason.ENV_DONE,
        0.5,
    )
    # the agent got the session URL as its model endpoint, and rLLM's model name
    assert ok.raw_result["base_url"] == "http://127.0.0.1:9/v1"
    assert ok.raw_result["model_id"] == MODEL
    assert ok.metadata["rollhub_status"] == "ok" and ok.elapsed > 0
    assert (fail.finished, fail.termination_reason) == (False, TerminationReason.ERROR)
    assert "agent failed on purpose for f" in fail.error and fail.reward is None
    assert "RuntimeError" in fail.raw_result["traceback"]
    assert (hang.finished, hang.termination_reason) == (False, TerminationReason.TIMEOUT)
    assert 3 <= hang.elapsed < 15
    assert (dup.finished, dup.termination_reason) == (False, TerminationReason.ERROR)
    assert "submitted twice" in dup.error

    # a killed worker: its task ends as an error of the infrastructure, and the runtime
    # carries on
    (killed,) = asyncio.run(remote.execute_tasks([submission("s-die", {"mode": "die"})]))
    assert (killed.finished, killed.termination_reason) == (False, TerminationReason.ERROR)
    assert killed.metadata["rollhub_status"] == "infra_error" and "lost" in killed.error
    (after,) = asyncio.run(remote.execute_tasks([submission("s-after", {"mode": "echo"})]))
    assert after.finished and after.termination_reason is TerminationReason.ENV_DONE


def test_execute_before_initialize_is_a_usage_error(tmp_path):
    rt = RollhubRemoteRuntime(runtime_config(tmp_path), host=make_host())
    with pytest.raises(UsageError, match=r"call initialize\(\) before execute_tasks\(\)"):
        asyncio.run(rt.execute_tasks([submission("s", {})]))
    rt.shutdown()  # nothing started: a no-op


class ContextOnlyLocal(LocalRuntime):
    """A runtime written against the core's constructor contract only: ``cls(options, *,
    context)``, no ``base_dir`` keyword (the older call would fail on it)."""

    name: ClassVar[str] = "context-only-local"
    contexts: ClassVar[list[ComponentContext]] = []

    def __init__(self, options: Any = None, *, context: ComponentContext) -> None:
        super().__init__(options, base_dir=context.base_dir)
        self.contexts.append(context)


class ContextOnlyPlugin:
    @hookimpl
    def rollhub_register_components(self, registry):
        registry.add_runtime(ContextOnlyLocal)


def test_the_runtime_and_store_are_built_as_the_hub_builds_them(tmp_path, monkeypatch):
    """Through the registry with a ComponentContext, and a relative file:// store resolved
    against the config file (not the working directory)."""
    config_dir, elsewhere = tmp_path / "config", tmp_path / "elsewhere"
    config_dir.mkdir()
    elsewhere.mkdir()
    (config_dir / "rollhub.toml").write_text(
        f'[runtime]\nname = "context-only-local"\napp = "{AGENT}:app"\nworkers = 1\n\n'
        f'[store]\nurl = "file://results"\n'
    )
    monkeypatch.chdir(elsewhere)
    ContextOnlyLocal.contexts.clear()
    rt = RollhubRemoteRuntime(
        config_dir / "rollhub.toml", exp_id="exp-ctx", host=make_host(ContextOnlyPlugin())
    )
    rt.initialize()
    try:
        (result,) = asyncio.run(rt.execute_tasks([submission("s-ctx", {"mode": "echo"})]))
    finally:
        rt.shutdown()
    assert result.finished and result.reward == 0.5, result.error
    (context,) = ContextOnlyLocal.contexts
    assert (context.base_dir, context.exp_id, context.run_dir) == (config_dir, "exp-ctx", None)
    assert context.config is rt.config
    assert result.metadata["result_key"] == "exp-ctx/q1/s-ctx.json"
    assert (config_dir / "results" / "exp-ctx" / "q1" / "s-ctx.json").is_file()
    assert not (elsewhere / "results").exists()


async def test_the_agent_talks_to_rllms_gateway_session(tmp_path, upstream, scripted, ids):
    from rllm_model_gateway.client import AsyncGatewayClient

    gateway = GatewayProcess(GatewaySettings(engine_url=f"{upstream.url}/v1"))
    root = await gateway.start()
    rt = RollhubRemoteRuntime(runtime_config(tmp_path, workers=1), model_id=MODEL, host=make_host())
    rt.initialize()  # called inside a running loop, as rLLM's trainer may
    try:
        outputs = [ids.tool_call("lookup", {"key": "z"}), ids.text("z is 122.")]
        scripted.add(*outputs)
        async with AsyncGatewayClient(root) as client:
            # what rLLM's RemoteAgentFlowEngine does around execute_tasks
            await client.create_session("4c1d7a8e-rllm")
            url = client.get_session_url("4c1d7a8e-rllm")
            (result,) = await rt.execute_tasks(
                [submission("4c1d7a8e-rllm", {"mode": "tools"}, url=url)]
            )
            traces = await client.get_session_traces("4c1d7a8e-rllm")
        assert result.finished and result.reward == 1.0, result.error
        assert result.termination_reason is TerminationReason.ENV_DONE
        assert [t.completion_token_ids for t in traces] == outputs
        (record,) = stitch("4c1d7a8e-rllm", [t.model_dump() for t in traces])
        assert [c.completion_ids for c in record.calls()] == outputs
    finally:
        rt.shutdown()
        await gateway.stop()


def outcome(status: str, result=None, error=None) -> RolloutOutcome:
    return RolloutOutcome(
        session_id="s", exp_id="e", input_id="q", result_key="e/q/s.json", status=status,
        result=result, error=error, submitted_at=10.0, finished_at=12.5,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("status", "result", "finished", "reason", "reward"),
    [
        ("ok", {"rewards": [0.0, 1.0]}, True, "env_done", 1.0),
        (
            "ok",
            {"rewards": 0.25, "termination_reason": "max_turns_exceeded"},
            True,
            "max_turns_exceeded",
            0.25,
        ),
        ("ok", {"rewards": "high", "termination_reason": "bogus"}, True, "env_done", None),
        ("ok", {"rewards": []}, True, "env_done", None),
        ("timeout", None, False, "timeout", None),
        ("agent_error", None, False, "error", None),
        ("infra_error", None, False, "error", None),
        ("submit_error", None, False, "error", None),
        ("cancelled", None, False, "error", None),
    ],
)
def test_outcomes_map_to_rllm_termination_reasons(status, result, finished, reason, reward):
    error = None if status == "ok" else ErrorInfo("Boom", "it broke", "tb")
    sub = submission("s", {}, task_id="q")
    r = task_result(sub, outcome(status, result, error))
    assert (r.finished, r.termination_reason.value, r.reward) == (finished, reason, reward)
    assert (r.session_id, r.task_id, r.elapsed) == ("s", "q", 2.5)
    assert r.metadata == {"rollhub_status": status, "result_key": "e/q/s.json", "attempts": 0}
    if not finished:
        assert r.error == "Boom: it broke"
        assert r.raw_result == {
            "status": status,
            "stop_reason": "Boom: it broke",
            "traceback": "tb",
        }


def test_mirrors_match_the_pinned_rllm_contract():
    """The mirror types and this runtime's methods are what the record says rLLM's are
    (``test_contract.py`` checks the record against rLLM's classes where rLLM is importable)."""
    sub_fields = {f.name: f.type for f in dataclasses.fields(TaskSubmission)}
    assert sub_fields == contract.TASK_SUBMISSION_FIELDS
    res = {}
    for f in dataclasses.fields(RemoteTaskResult):
        if f.default is not dataclasses.MISSING:
            default = repr(f.default)
        elif f.default_factory is not dataclasses.MISSING:
            default = repr(f.default_factory())
        else:
            default = "<required>"
        res[f.name] = (f.type, default)
    assert res == contract.REMOTE_TASK_RESULT_FIELDS
    assert {m.name: m.value for m in TerminationReason} == contract.TERMINATION_REASONS
    for name, (is_async, params) in contract.REMOTE_RUNTIME_METHODS.items():
        method = getattr(RollhubRemoteRuntime, name)
        assert asyncio.iscoroutinefunction(method) is is_async
        assert tuple(inspect.signature(method).parameters)[1:] == params


def test_install_teaches_rllms_factory_the_rollhub_backend(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="rLLM is not installed"):
        install(runtime_config(tmp_path))

    # rLLM's factory module as it is shaped at the pinned commit: a closed dispatch on
    # config.backend that raises ValueError for any other name
    calls = []

    def create_remote_runtime(config, exp_id="", model_id=""):
        calls.append(config.backend)
        if config.backend in ("agentcore", "harbor"):
            return f"rllm's {config.backend}"
        raise ValueError(f"Unknown remote runtime backend: {config.backend!r}")

    module = types.ModuleType("rllm.engine.remote_runtime")
    module.create_remote_runtime = create_remote_runtime
    for name in ("rllm", "rllm.engine"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "rllm.engine.remote_runtime", module)
    sys.modules["rllm.engine"].remote_runtime = module

    install(runtime_config(tmp_path))
    install(runtime_config(tmp_path), api_key="k")  # replaces, does not stack
    cfg = types.SimpleNamespace(backend="rollhub", session_timeout=12.0)
    rt = module.create_remote_runtime(cfg, exp_id="my-exp", model_id="m")
    assert isinstance(rt, RollhubRemoteRuntime)
    assert (rt.session_timeout, rt.exp_id, rt.model_id, rt.api_key) == (12.0, "my-exp", "m", "k")
    agentcore = types.SimpleNamespace(backend="agentcore", session_timeout=1.0)
    assert module.create_remote_runtime(agentcore) == "rllm's agentcore"
    assert calls == ["agentcore"]
