"""Upstream's ``RolloutClient`` (agentcore-rl-toolkit from PyPI) drives a rollhub agent.

Path: upstream client → real boto3 → local data plane → ``AgentCoreRLApp`` → SeaweedFS,
and upstream's futures read every result back from S3.
"""

from __future__ import annotations

import json

import httpx
import pytest
from agentcore_rl_toolkit import RolloutClient
from rollhub.compat.agentcore_local import runtime_arn
from rollhub.testing.servers import serve_app

from tests.compat import rollhub_math_app
from tests.compat.loopback_aws import BUCKET

ARN = runtime_arn("rollhub_math")


@pytest.fixture
def served(plane):
    with serve_app(rollhub_math_app.make_app()) as url:
        plane.app.add_runtime(ARN, url)
        yield url


def test_run_batch_every_result_read_back_by_upstream(plane, served, s3) -> None:
    client = RolloutClient(ARN, BUCKET, "exp-cross", tps_limit=50, model_id="m-1", temperature=0.3)
    payloads = [{"a": i, "b": 1, "answer": i + 1 if i % 2 == 0 else 0} for i in range(6)]
    items = list(
        client.run_batch(payloads, max_concurrent_sessions=3, timeout=30, initial_interval=0.05)
    )
    assert sorted(item.index for item in items) == list(range(6))
    for item in items:
        assert item.success, item.error
        doc = item.result
        i = item.index
        assert doc["rewards"] == (1.0 if i % 2 == 0 else 0.0)
        assert doc["guess"] == i + 1
        # upstream's document fields, as its app writes them
        assert doc["status_code"] == 200
        assert doc["stop_reason"] == "end_turn"
        assert doc["s3_bucket"] == BUCKET
        sid = doc["session_seen"]
        assert doc["result_key"] == f"exp-cross/{doc['input_id']}/{sid}.json"
        assert doc["payload"]["a"] == i
        assert doc["payload"]["_rollout"]["s3_bucket"] == BUCKET
        assert doc["temperature_seen"] == 0.3
        assert doc["model_seen"] == "m-1"
        # where upstream's client looks, and rollhub's metadata rides along
        stored = json.loads(s3.get_object(Bucket=BUCKET, Key=doc["result_key"])["Body"].read())
        assert stored["_rollhub"]["status"] == "ok"
    invokes = [c for c in plane.app.calls if c[0] == "InvokeAgentRuntime"]
    stops = [c for c in plane.app.calls if c[0] == "StopRuntimeSession"]
    assert len(invokes) == 6
    # upstream stops every session once it has the result; none stays open
    assert {c[2] for c in stops} == {c[2] for c in invokes}
    assert not plane.app.sessions


def test_failure_is_upstreams_error_document(plane, served) -> None:
    client = RolloutClient(ARN, BUCKET, "exp-fail")
    future = client.invoke({"fail": "boom", "a": 1, "b": 1, "answer": 2}, input_id="q-fail")
    doc = future.result(timeout=30)
    assert doc["status_code"] == 500
    assert doc["stop_reason"] == "asked to fail: boom"
    assert "RuntimeError" in doc["traceback"]
    assert doc["input_id"] == "q-fail"


async def test_async_batch_and_future(plane, served) -> None:
    client = RolloutClient(ARN, BUCKET, "exp-async")
    items = [
        item
        async for item in client.run_batch_async(
            [{"a": 2, "b": 2, "answer": 4}] * 3, max_concurrent_sessions=2, initial_interval=0.05
        )
    ]
    assert [item.success for item in items] == [True] * 3
    assert all(item.result["rewards"] == 1.0 for item in items)
    future = await client.invoke_async({"a": 1, "b": 1, "answer": 3})
    doc = await future.result_async(timeout=30)
    assert doc["rewards"] == 0.0


def test_missing_upstream_field_is_upstreams_500_naming_it(plane, served) -> None:
    answer = httpx.post(
        f"{served}/invocations",
        json={"a": 1, "_rollout": {"exp_id": "e", "s3_bucket": BUCKET}},
        headers={"X-Amzn-Bedrock-AgentCore-Runtime-Session-Id": "s" * 40},
    )
    assert answer.status_code == 500
    assert answer.json() == {"error": "Missing required rollout config field: 'input_id'"}
