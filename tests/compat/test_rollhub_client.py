"""rollhub's client drives unmodified agentcore-rl-toolkit agents (and rollhub agents)
through the local data plane, with SeaweedFS as S3: every outcome terminal and exact."""

from __future__ import annotations

import importlib
import io
import json
import sys
import types
from pathlib import Path

import pytest
from rollhub.client import AsyncRolloutClient
from rollhub.compat.agentcore_local import runtime_arn
from rollhub.compat.upstream_client import RolloutClient
from rollhub.compat.upstream_layout import UpstreamLayoutStore
from rollhub.runtimes.agentcore import AgentCoreRuntime
from rollhub.stores import open_store
from rollhub.testing.servers import serve_app

from tests.compat.loopback_aws import BUCKET

UPSTREAM_ARN = runtime_arn("upstream_math")
ROLLHUB_ARN = runtime_arn("rollhub_math")
AGENT_SOURCE = Path(__file__).with_name("upstream_math_agent.py")
ONE_IMPORT = (
    "from agentcore_rl_toolkit import AgentCoreRLApp",
    "from rollhub.compat import AgentCoreRLApp",
)


@pytest.fixture
def upstream_agent(plane):
    # Imported only now: upstream's app builds its S3 client from the environment.
    module = importlib.import_module("tests.compat.upstream_math_agent")
    with serve_app(module.app) as url:
        plane.app.add_runtime(UPSTREAM_ARN, url)
        yield url


@pytest.fixture
def one_import_agent(plane):
    """The upstream agent's module with its one import changed, served under ROLLHUB_ARN."""
    source = AGENT_SOURCE.read_text()
    assert source.count(ONE_IMPORT[0]) == 1
    module = types.ModuleType("one_import_agent")
    exec(compile(source.replace(*ONE_IMPORT), "one_import_agent.py", "exec"), module.__dict__)
    sys.modules.pop("one_import_agent", None)
    with serve_app(module.app) as url:
        plane.app.add_runtime(ROLLHUB_ARN, url)
        yield module


def _payloads() -> list[dict]:
    return [
        {"a": 1, "b": 2, "answer": 3},
        {"a": 1, "b": 2, "answer": 4},
        {"a": 0, "b": 0, "answer": 0, "fail": "x"},
    ]


def _check_items(items: list, *, arn_sessions: set[str] | None = None) -> None:
    by_index = {item.index: item for item in items}
    assert sorted(by_index) == [0, 1, 2]
    assert all(item.success for item in items), [item.error for item in items]
    assert by_index[0].result["rewards"] == 1.0
    assert by_index[0].result["status_code"] == 200
    assert by_index[0].result["temperature_seen"] == 0.5
    assert by_index[1].result["rewards"] == 0.0
    failed = by_index[2].result
    assert failed["status_code"] == 500
    assert failed["stop_reason"] == "bad input x"
    assert "ValueError" in failed["traceback"]


def test_upstream_signature_client_drives_unmodified_upstream_agent(upstream_agent) -> None:
    client = RolloutClient(UPSTREAM_ARN, BUCKET, "exp-facade", tps_limit=50, temperature=0.5)
    try:
        items = list(client.run_batch(_payloads(), max_concurrent_sessions=2, timeout=30))
    finally:
        client.close()
    _check_items(items)


def test_upstream_signature_client_drives_one_import_agent(one_import_agent) -> None:
    client = RolloutClient(ROLLHUB_ARN, BUCKET, "exp-oneimport", temperature=0.5)
    try:
        items = list(client.run_batch(_payloads(), max_concurrent_sessions=3, timeout=30))
    finally:
        client.close()
    _check_items(items)
    assert all("_rollhub" in item.result for item in items)


async def test_rollhub_client_outcomes_exact(plane, upstream_agent) -> None:
    runtime = AgentCoreRuntime(runtime_arn=UPSTREAM_ARN)
    store = UpstreamLayoutStore(open_store(f"s3://{BUCKET}"))
    async with AsyncRolloutClient(
        runtime, store, exp_id="exp-native", defaults={"s3_bucket": BUCKET}, close_runtime=True
    ) as client:
        ok = client.invoke({"a": 2, "b": 2, "answer": 4})
        wrong = client.invoke({"a": 2, "b": 2, "answer": 5})
        failed = client.invoke({"a": 0, "b": 0, "answer": 0, "fail": "y"})
        slow = client.invoke({"a": 0, "b": 0, "answer": 0, "sleep": 3}, timeout=1.0)
        outcomes = [await f for f in (ok, wrong, failed, slow)]
    assert [o.status for o in outcomes] == ["ok", "ok", "agent_error", "timeout"]
    assert outcomes[0].result["rewards"] == 1.0
    assert outcomes[0].result["session_seen"] == ok.session_id
    assert outcomes[1].result["rewards"] == 0.0
    error = outcomes[2].error
    assert (error.type, error.message) == ("ValueError", "bad input y")
    stops = {c[2] for c in plane.app.calls if c[0] == "StopRuntimeSession"}
    assert slow.session_id in stops


def test_client_options_reach_the_agent_with_a_warning(upstream_agent, caplog) -> None:
    # upstream sends every extra keyword as a _rollout field; so does the compat client,
    # and it says where the option belongs
    client = RolloutClient(UPSTREAM_ARN, BUCKET, "exp-x", max_concurrent_sessions=4)
    try:
        assert client.extra_config == {"max_concurrent_sessions": 4}
        future = client.invoke({"a": 1, "b": 1, "answer": 2}, timeout=7)
        doc = future.result(timeout=30)
    finally:
        client.close()
    assert doc["rewards"] == 1.0
    assert doc["payload"]["_rollout"]["max_concurrent_sessions"] == 4
    assert doc["payload"]["_rollout"]["timeout"] == 7
    assert "run_batch(payloads, max_concurrent_sessions=N)" in caplog.text
    assert future.done() and future.cancelled


def test_upstream_trainer_script_with_one_import_changed(
    upstream_agent, monkeypatch, capsys
) -> None:
    """upstream_driver.py's client, written for agentcore-rl-toolkit, with its import changed."""
    source = Path(__file__).with_name("upstream_driver.py").read_text()
    swap = (
        "from agentcore_rl_toolkit import RolloutClient",
        "from rollhub.compat import RolloutClient",
    )
    assert source.count(swap[0]) == 1
    module = types.ModuleType("one_import_trainer")
    exec(compile(source.replace(*swap), "one_import_trainer.py", "exec"), module.__dict__)
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(_payloads())))
    module.run_client(UPSTREAM_ARN, BUCKET, "exp-trainer")
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    by_index = {item["index"]: item for item in out["items"]}
    assert sorted(by_index) == [0, 1, 2]
    assert all(item["success"] for item in by_index.values())
    assert by_index[0]["result"]["rewards"] == 1.0
    assert by_index[0]["result"]["temperature_seen"] == 0.5
    assert by_index[2]["result"]["status_code"] == 500
