"""The agentcore runtime against botocore's real service model (Stubber validates shapes)."""

from __future__ import annotations

import io
import json

import boto3
import pytest
from botocore.response import StreamingBody
from botocore.stub import ANY, Stubber
from rollhub.client import AsyncRolloutClient
from rollhub.errors import ConfigError, SubmissionError
from rollhub.rollout import RolloutConfig, RolloutRequest
from rollhub.runtimes.agentcore import AgentCoreRuntime, agentcore_session_id, session_id_bounds

ARN = "arn:aws:bedrock-agentcore:eu-west-1:123456789012:runtime/math_agent-AbC123"


def make_runtime(**options) -> AgentCoreRuntime:
    rt = AgentCoreRuntime(runtime_arn=ARN, **options)
    rt.client = rt._make_client()
    return rt


@pytest.fixture(autouse=True)
def fake_credentials(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_PROFILE", raising=False)


def request(sid: str, store_url: str = "s3://bucket/results") -> RolloutRequest:
    rollout = RolloutConfig(exp_id="e", input_id="q1", session_id=sid, result_store=store_url)
    return RolloutRequest(payload={"question": "2+2"}, rollout=rollout)


def ok_response(sid: str, location: str) -> dict:
    body = json.dumps({"status": "processing", "result": location}).encode()
    return {
        "runtimeSessionId": sid,
        "contentType": "application/json",
        "statusCode": 200,
        "response": StreamingBody(io.BytesIO(body), len(body)),
    }


def test_session_ids_meet_the_service_minimum() -> None:
    low, high = session_id_bounds()
    assert (low, high) == (33, 256)
    short = agentcore_session_id("g1-0-abc")
    assert len(short) >= low and short.startswith("g1-0-abc-")
    assert agentcore_session_id("g1-0-abc") == short  # deterministic: stop finds it
    long = "rh-" + "a" * 32
    assert agentcore_session_id(long) == long
    with pytest.raises(ConfigError, match="longer"):
        agentcore_session_id("x" * (high + 1))


def test_region_from_arn_and_adaptive_retries() -> None:
    rt = make_runtime(max_attempts=4)
    assert rt.client.meta.region_name == "eu-west-1"
    assert rt.client.meta.config.retries["mode"] == "adaptive"
    assert rt.client.meta.config.retries["total_max_attempts"] == 4


def test_bad_arn_names_the_field() -> None:
    with pytest.raises(ConfigError, match="runtime_arn"):
        AgentCoreRuntime(runtime_arn="arn:aws:lambda:us-east-1:123:function/x")


def test_one_limiter_per_arn() -> None:
    a, b = AgentCoreRuntime(runtime_arn=ARN), AgentCoreRuntime(runtime_arn=ARN)
    other = AgentCoreRuntime(runtime_arn=ARN.replace("math_agent", "other"))
    assert a.limiter is b.limiter and a.limiter is not other.limiter
    assert a.limiter.rate == 25.0


async def test_submit_sends_the_documented_request() -> None:
    rt = make_runtime(qualifier="DEFAULT")
    sid = "short-session"
    rsid = agentcore_session_id(sid)
    req = request(sid)
    with Stubber(rt.client) as stub:
        stub.add_response(
            "invoke_agent_runtime",
            ok_response(rsid, "s3://bucket/results/e/q1/short-session.json"),
            expected_params={
                "agentRuntimeArn": ARN,
                "runtimeSessionId": rsid,
                "qualifier": "DEFAULT",
                "payload": json.dumps(req.to_wire(), separators=(",", ":")).encode(),
                "contentType": "application/json",
                "accept": "application/json",
            },
        )
        stub.add_response(
            "stop_runtime_session",
            {"runtimeSessionId": rsid, "statusCode": 200},
            expected_params={
                "agentRuntimeArn": ARN,
                "runtimeSessionId": rsid,
                "qualifier": "DEFAULT",
            },
        )
        receipt = await rt.submit(req)
        await rt.cancel(sid)
        stub.assert_no_pending_responses()
    assert receipt.result_location.endswith("short-session.json")
    assert receipt.details["runtime_session_id"] == rsid


@pytest.mark.parametrize(
    ("code", "status", "transient"),
    [
        ("ThrottlingException", 429, True),
        ("ServiceQuotaExceededException", 402, True),
        ("InternalServerException", 500, True),
        ("RetryableConflictException", 409, True),
        ("ValidationException", 400, False),
        ("AccessDeniedException", 403, False),
        ("ResourceNotFoundException", 404, False),
        ("RuntimeClientError", 424, False),
    ],
)
async def test_service_errors_map_to_transient_or_permanent(
    code: str, status: int, transient: bool
) -> None:
    rt = make_runtime()
    with Stubber(rt.client) as stub:
        stub.add_client_error(
            "invoke_agent_runtime",
            service_error_code=code,
            service_message="nope",
            http_status_code=status,
        )
        with pytest.raises(SubmissionError) as info:
            await rt.submit(request("rh-" + "b" * 32))
    assert info.value.transient is transient
    assert info.value.code == code and code in str(info.value)
    assert isinstance(info.value.__cause__, Exception)


async def test_stop_of_a_gone_session_is_not_an_error() -> None:
    rt = make_runtime()
    with Stubber(rt.client) as stub:
        stub.add_client_error(
            "stop_runtime_session",
            service_error_code="ResourceNotFoundException",
            http_status_code=404,
        )
        await rt.cancel("rh-" + "c" * 32)
        stub.add_client_error(
            "stop_runtime_session", service_error_code="ThrottlingException", http_status_code=429
        )
        with pytest.raises(SubmissionError) as info:
            await rt.cancel("rh-" + "c" * 32)
    assert info.value.transient


async def test_client_polls_the_store_and_stops_the_session(tmp_path) -> None:
    """End to end with the client: no loopback callbacks for a remote runtime."""
    from rollhub.results.document import build_result_document
    from rollhub.stores.file import FileResultStore

    store = FileResultStore(tmp_path, fsync=False)
    rt = make_runtime()
    stub = Stubber(rt.client)
    stub.add_response(
        "invoke_agent_runtime",
        ok_response("x" * 33, "s3://b/k"),
        {
            "agentRuntimeArn": ARN,
            "runtimeSessionId": ANY,
            "payload": ANY,
            "contentType": ANY,
            "accept": ANY,
        },
    )
    stub.add_response(
        "stop_runtime_session",
        {"runtimeSessionId": "x" * 33, "statusCode": 200},
        {"agentRuntimeArn": ARN, "runtimeSessionId": ANY},
    )
    with stub:
        async with AsyncRolloutClient(rt, store, exp_id="ac", poll_initial_s=0.02) as client:
            assert client.callback_url is None
            fut = await client.invoke_async({"question": "2+2"})
            doc = build_result_document(
                rollout=fut.request.rollout,
                payload=fut.request.to_wire(),
                started_at=1.0,
                finished_at=2.0,
                result={"rewards": 1.0},
            )
            store.put(fut.result_key, doc)
            outcome = await fut.result_async(timeout=10)
            await client._watch.settle()
        stub.assert_no_pending_responses()  # the session was stopped once the result was read
    assert outcome.status == "ok" and outcome.result == {"rewards": 1.0}


def test_boto3_is_imported_lazily() -> None:
    import subprocess
    import sys

    code = "import sys, rollhub.runtimes.agentcore, rollhub.builtin.runtimes; print('boto3' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_boto3_available() -> None:
    assert boto3.__version__


async def test_invoke_and_stop_share_the_rate_limit() -> None:
    import time

    arn = ARN.replace("math_agent", "limited")
    rt = AgentCoreRuntime(runtime_arn=arn, tps=20)
    rt.client = make_runtime().client
    rt.options = rt.options.model_copy(update={"runtime_arn": ARN})  # stubbed client's ARN
    with Stubber(rt.client) as stub:
        for i in range(15):
            sid = f"rh-{i:032d}"
            stub.add_response("invoke_agent_runtime", ok_response(sid, "s3://b/k"))
            stub.add_response("stop_runtime_session", {"runtimeSessionId": sid, "statusCode": 200})
        t0 = time.monotonic()
        for i in range(15):
            await rt.submit(request(f"rh-{i:032d}"))
            await rt.cancel(f"rh-{i:032d}")
        elapsed = time.monotonic() - t0
    # 30 calls at 20/s with a bucket of 20: at least (30 - 20) / 20 s.
    assert elapsed >= 0.45
