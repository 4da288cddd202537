"""Upstream users' own unit tests, with only the import changed: they patch the client
module's ``boto3`` and script the service answers, as they did with
``patch("agentcore_rl_toolkit.client.boto3")``."""

from __future__ import annotations

import io
import json
from unittest.mock import MagicMock, patch

import pytest
from botocore.exceptions import ClientError
from rollhub.compat import RolloutClient, RolloutFuture

ARN = "arn:aws:bedrock-agentcore:eu-central-1:123456789012:runtime/agent-x"


def _error(code: str, op: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": code}}, op)


@pytest.fixture
def boto3():
    with patch("rollhub.compat.upstream_client.boto3") as mocked:
        clients = {"bedrock-agentcore": MagicMock(), "s3": MagicMock()}
        mocked.client.side_effect = lambda service, **kw: clients[service]
        yield mocked, clients


def _answer(bucket: str, key: str) -> dict:
    body = {"status": "processing", "s3_bucket": bucket, "result_key": key}
    return {"response": io.BytesIO(json.dumps(body).encode())}


def test_invoke_sends_the_rollout_and_reads_the_result(boto3) -> None:
    mocked, clients = boto3
    acr, s3 = clients["bedrock-agentcore"], clients["s3"]
    acr.invoke_agent_runtime.return_value = _answer("b", "exp/q1/s1.json")
    s3.head_object.side_effect = [_error("404", "HeadObject"), {}]
    s3.get_object.return_value = {"Body": io.BytesIO(b'{"rewards": 1.0, "status_code": 200}')}

    client = RolloutClient(ARN, "b", "exp", base_url="http://m", model_id="q", temperature=0.1)
    assert client.agentcore_client is acr and client.s3_client is s3
    services = [c.args[0] for c in mocked.client.call_args_list]
    assert services == ["bedrock-agentcore", "s3"]
    assert all(c.kwargs["region_name"] == "eu-central-1" for c in mocked.client.call_args_list)

    future = client.invoke({"prompt": "2+2"}, session_id="s1", input_id="q1", top_p=0.9)
    sent = acr.invoke_agent_runtime.call_args.kwargs
    assert (sent["agentRuntimeArn"], sent["runtimeSessionId"]) == (ARN, "s1")
    assert json.loads(sent["payload"]) == {
        "prompt": "2+2",
        "_rollout": {"exp_id": "exp", "input_id": "q1", "s3_bucket": "b", "temperature": 0.1,
                     "base_url": "http://m", "model_id": "q", "top_p": 0.9},
    }  # fmt: skip
    future._poll_interval = 0.01
    assert future.result(timeout=5) == {"rewards": 1.0, "status_code": 200}
    assert s3.head_object.call_count == 2
    acr.stop_runtime_session.assert_called_once_with(agentRuntimeArn=ARN, runtimeSessionId="s1")


def test_invoke_raises_what_the_service_raised(boto3) -> None:
    _, clients = boto3
    clients["bedrock-agentcore"].invoke_agent_runtime.side_effect = _error(
        "AccessDeniedException", "InvokeAgentRuntime"
    )
    client = RolloutClient(ARN, "b", "exp")
    with pytest.raises(ClientError, match="AccessDeniedException"):
        client.invoke({"prompt": "x"})


def test_s3_errors_other_than_404_are_botocores(boto3) -> None:
    _, clients = boto3
    s3 = clients["s3"]
    s3.head_object.side_effect = _error("403", "HeadObject")
    future = RolloutFuture(s3_client=s3, s3_bucket="b", result_key="k.json")
    with pytest.raises(ClientError) as raised:
        future.result(timeout=1)
    assert raised.value.response["Error"]["Code"] == "403"


def test_cancel_false_when_stop_fails(boto3) -> None:
    _, clients = boto3
    acr = clients["bedrock-agentcore"]
    acr.stop_runtime_session.side_effect = _error("ThrottlingException", "StopRuntimeSession")
    future = RolloutFuture(MagicMock(), "b", "k.json", session_id="s", agentcore_client=acr,
                           agent_runtime_arn=ARN)  # fmt: skip
    assert future.cancel() is False and future.cancelled
    assert RolloutFuture(MagicMock(), "b", "k.json").cancel() is False  # nothing to stop


async def test_async_with_mocks(boto3) -> None:
    _, clients = boto3
    acr, s3 = clients["bedrock-agentcore"], clients["s3"]
    acr.invoke_agent_runtime.side_effect = lambda **kw: _answer(
        "b", f"exp/q/{kw['runtimeSessionId']}.json"
    )
    s3.head_object.return_value = {}
    s3.get_object.side_effect = lambda **kw: {"Body": io.BytesIO(b'{"rewards": 0.5}')}
    client = RolloutClient(ARN, "b", "exp")
    future = await client.invoke_async({"p": 1})
    assert await future == {"rewards": 0.5}
    items = [item async for item in client.run_batch_async([{"p": 1}, {"p": 2}], 2)]
    assert sorted(i.index for i in items) == [0, 1] and all(i.success for i in items)


async def test_async_errors_with_mocks(boto3) -> None:
    _, clients = boto3
    acr, s3 = clients["bedrock-agentcore"], clients["s3"]
    acr.invoke_agent_runtime.side_effect = _error("ThrottlingException", "InvokeAgentRuntime")
    acr.stop_runtime_session.side_effect = _error("ThrottlingException", "StopRuntimeSession")
    s3.head_object.side_effect = _error("403", "HeadObject")
    client = RolloutClient(ARN, "b", "exp")
    with pytest.raises(ClientError, match="ThrottlingException"):
        await client.invoke_async({"p": 1})
    (item,) = [item async for item in client.run_batch_async([{"p": 1}], 1)]
    assert not item.success and "ThrottlingException" in item.error
    assert item.error.startswith("Traceback (most recent call last)")
    future = RolloutFuture(s3, "b", "k.json", session_id="s", agentcore_client=acr,
                           agent_runtime_arn=ARN)  # fmt: skip
    with pytest.raises(ClientError, match="403"):
        await future.result_async(timeout=1)
    assert await future.cancel_async() is False and future.cancelled


def test_rollhub_native_results_shown_with_upstreams_fields(boto3) -> None:
    _, clients = boto3
    s3 = clients["s3"]
    meta = {"status": "error", "error": {"type": "ValueError", "message": "bad", "traceback": "T"}}
    s3.get_object.return_value = {"Body": io.BytesIO(json.dumps({"_rollhub": meta}).encode())}
    doc = RolloutFuture(s3, "b", "k.json").result(timeout=1)
    assert (doc["status_code"], doc["stop_reason"], doc["traceback"]) == (500, "bad", "T")
