"""``rollhub.compat.RolloutClient`` and its futures and batches behave as upstream's, from
sync and async code, through the local AgentCore data plane and SeaweedFS."""

from __future__ import annotations

import json

import pytest
from botocore.exceptions import ClientError
from rollhub.compat import AsyncBatchResult, BatchItem, BatchResult, RolloutClient, RolloutFuture
from rollhub.compat.agentcore_local import runtime_arn
from rollhub.testing.servers import serve_app

from tests.compat import rollhub_math_app
from tests.compat.loopback_aws import BUCKET, REGION

ARN = runtime_arn("compat_math")
UNKNOWN_ARN = runtime_arn("nobody_serves_this")


@pytest.fixture
def agent(plane):
    with serve_app(rollhub_math_app.make_app()) as url:
        plane.app.add_runtime(ARN, url)
        yield plane


def test_upstream_attributes(agent) -> None:
    client = RolloutClient(ARN, BUCKET, "exp-attr", tps_limit=7, base_url="http://m/v1",
                           model_id="q", temperature=0.2)  # fmt: skip
    assert (client.region, client.tps_limit) == (REGION, 7)
    assert (client.base_url, client.model_id) == ("http://m/v1", "q")
    assert client.extra_config == {"temperature": 0.2}
    future = client.invoke({"a": 1, "b": 1, "answer": 2}, input_id="q-attr")
    assert future.s3_bucket == BUCKET and future.input_id == "q-attr"
    assert future.result_key == f"exp-attr/q-attr/{future.session_id}.json"
    assert isinstance(future.ready_to_poll(), bool)
    assert future.time_until_next_poll() >= 0
    doc = future.result(timeout=30)
    assert doc["model_seen"] == "q" and doc["temperature_seen"] == 0.2
    assert doc["payload"]["_rollout"]["base_url"] == "http://m/v1"
    assert future.time_until_next_poll() == float("inf")
    with pytest.raises(ValueError, match="Invalid ARN format"):
        RolloutClient("not-an-arn", BUCKET, "exp")


def test_invoke_raises_submission_errors(agent) -> None:
    client = RolloutClient(UNKNOWN_ARN, BUCKET, "exp-bad")
    with pytest.raises(ClientError) as raised:
        client.invoke({"a": 1})
    assert raised.value.response["Error"]["Code"] == "ResourceNotFoundException"
    items = list(client.run_batch([{"a": 1}], max_concurrent_sessions=1))
    assert [item.success for item in items] == [False]
    assert items[0].error.startswith("Traceback (most recent call last)")
    assert "ResourceNotFoundException" in items[0].error


async def test_async_api_from_a_running_loop(agent) -> None:
    client = RolloutClient(ARN, BUCKET, "exp-async")  # created inside the loop
    with pytest.raises(ClientError):
        await RolloutClient(UNKNOWN_ARN, BUCKET, "exp-async").invoke_async({"a": 1})
    future = await client.invoke_async({"a": 2, "b": 3, "answer": 5})
    assert (await future)["rewards"] == 1.0
    future = await client.invoke_async({"a": 2, "b": 3, "answer": 4})
    assert (await future.result_async(timeout=30))["rewards"] == 0.0
    batch = client.run_batch_async([{"a": 1, "b": 1, "answer": 2}] * 3, 2, initial_interval=0.05)
    assert isinstance(batch, AsyncBatchResult)
    items = [item async for item in batch]
    assert sorted(item.index for item in items) == [0, 1, 2]
    assert all(item.success and item.result["rewards"] == 1.0 for item in items)
    slow = await client.invoke_async({"a": 0, "b": 0, "answer": 0, "sleep": 5})
    with pytest.raises(TimeoutError):
        await slow.result_async(timeout=0.5)
    assert slow.cancelled


def test_timeouts_say_timeout(agent) -> None:
    client = RolloutClient(ARN, BUCKET, "exp-timeout")
    future = client.invoke({"a": 0, "b": 0, "answer": 0, "sleep": 5})
    with pytest.raises(TimeoutError, match=r"Result not ready after 0\.3s"):
        future.result(timeout=0.3)
    assert future.cancelled
    batch = client.run_batch([{"a": 0, "b": 0, "answer": 0, "sleep": 5}], 1, timeout=0.5)
    assert isinstance(batch, BatchResult)
    items = list(batch)
    assert [(i.success, i.error) for i in items] == [(False, "Timeout after 0.5s")]


def test_cancel_is_true_only_when_the_session_stopped(agent) -> None:
    client = RolloutClient(ARN, BUCKET, "exp-cancel")
    future = client.invoke({"a": 0, "b": 0, "answer": 0, "sleep": 5})
    assert future.cancel() is True
    assert future.cancel() is False  # only the first call tries
    stopped = client.invoke({"a": 0, "b": 0, "answer": 0, "sleep": 5})
    stray = RolloutFuture(
        s3_client=client.s3_client, s3_bucket=BUCKET, result_key=stopped.result_key,
        session_id="never-started-" + "0" * 24, agentcore_client=client.agentcore_client,
        agent_runtime_arn=ARN,
    )  # fmt: skip
    assert stray.cancel() is False  # the plane has no such session: the stop failed
    assert stray.cancelled
    stopped.cancel()


def test_futures_and_batches_built_by_hand(agent, s3) -> None:
    # scripts build these themselves, with upstream's keywords
    s3.put_object(Bucket=BUCKET, Key="exp-hand/q/s.json", Body=json.dumps({"rewards": 1}))
    future = RolloutFuture(s3_client=s3, s3_bucket=BUCKET, result_key="exp-hand/q/s.json",
                           initial_interval=0.01)  # fmt: skip
    assert future.done() and future.result() == {"rewards": 1}
    client = RolloutClient(ARN, BUCKET, "exp-hand")
    batch = BatchResult(client, [{"a": 1, "b": 1, "answer": 2}], max_concurrent=1,
                        initial_interval=0.05)  # fmt: skip
    (item,) = list(batch)
    assert isinstance(item, BatchItem) and item.success and item.result["rewards"] == 1.0
    assert BatchItem(success=False).error is None
