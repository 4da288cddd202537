"""The local data plane speaks ``bedrock-agentcore`` as the real boto3 client expects."""

from __future__ import annotations

import json
import socket

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from rollhub.compat.agentcore_local import LocalAgentCore, runtime_arn
from rollhub.errors import ConfigError
from rollhub.runtimes.agentcore import AgentCoreRuntime
from rollhub.testing.servers import serve_app
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

ARN = runtime_arn("echo")
SID = "s" * 40


def _echo_app() -> Starlette:
    async def invocations(request: Request) -> JSONResponse:
        body = json.loads(await request.body())
        headers = {k.lower(): v for k, v in request.headers.items()}
        return JSONResponse({"got": body, "headers": headers}, status_code=body.get("status", 200))

    return Starlette(routes=[Route("/invocations", invocations, methods=["POST"])])


@pytest.fixture
def echo(plane):
    with serve_app(_echo_app()) as url:
        plane.app.add_runtime(ARN, url)
        yield boto3.client("bedrock-agentcore", region_name="us-west-2")


def test_invoke_forwards_payload_and_headers(echo, plane) -> None:
    answer = echo.invoke_agent_runtime(
        agentRuntimeArn=ARN,
        runtimeSessionId=SID,
        payload=json.dumps({"x": 1}).encode(),
        contentType="application/json",
        runtimeUserId="user-1",
    )
    body = json.loads(answer["response"].read())
    assert body["got"] == {"x": 1}
    assert body["headers"]["x-amzn-bedrock-agentcore-runtime-session-id"] == SID
    assert body["headers"]["x-amzn-bedrock-agentcore-runtime-user-id"] == "user-1"
    assert answer["runtimeSessionId"] == SID
    assert answer["statusCode"] == 200
    assert plane.app.calls == [("InvokeAgentRuntime", ARN, SID)]
    echo.stop_runtime_session(agentRuntimeArn=ARN, runtimeSessionId=SID)
    assert not plane.app.sessions


def test_errors_are_service_errors(echo, plane) -> None:
    other = runtime_arn("missing")
    with pytest.raises(ClientError) as info:
        echo.invoke_agent_runtime(agentRuntimeArn=other, runtimeSessionId=SID, payload=b"{}")
    assert info.value.response["Error"]["Code"] == "ResourceNotFoundException"
    with pytest.raises(ClientError) as info:
        echo.stop_runtime_session(agentRuntimeArn=ARN, runtimeSessionId="t" * 40)
    assert info.value.response["Error"]["Code"] == "ResourceNotFoundException"
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    plane.app.add_runtime(other, dead)
    with pytest.raises(ClientError) as info:
        echo.invoke_agent_runtime(agentRuntimeArn=other, runtimeSessionId=SID, payload=b"{}")
    assert info.value.response["Error"]["Code"] == "RuntimeClientError"


@pytest.mark.parametrize(
    ("status", "code"),
    [(400, "RuntimeClientError"), (429, "ThrottlingException"), (503, "InternalServerException")],
)
def test_app_errors_become_service_errors(echo, status: int, code: str) -> None:
    once = boto3.client(
        "bedrock-agentcore",
        region_name="us-west-2",
        config=Config(retries={"total_max_attempts": 1}),
    )
    with pytest.raises(ClientError) as info:
        once.invoke_agent_runtime(
            agentRuntimeArn=ARN, runtimeSessionId=SID, payload=json.dumps({"status": status})
        )
    assert info.value.response["Error"]["Code"] == code
    assert f"HTTP {status}" in info.value.response["Error"]["Message"]


async def test_rollhub_runtime_cancel_of_unknown_session_is_quiet(echo) -> None:
    runtime = AgentCoreRuntime(runtime_arn=ARN)
    await runtime.start()
    try:
        await runtime.cancel("rh-never-started")
    finally:
        await runtime.close()


def test_bad_runtime_url_names_the_field() -> None:
    with pytest.raises(ConfigError, match="runtimes"):
        LocalAgentCore({ARN: "127.0.0.1:8080"})
