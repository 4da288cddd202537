"""Create or update the runtime and wait for READY, against botocore's control-plane model."""

from __future__ import annotations

import pytest
from rollhub.deploy.agentcore_control import (
    RuntimeSpec,
    check_environment,
    create_or_update,
    find_runtime,
    runtime_request,
    wait_until_ready,
)
from rollhub.deploy.errors import DeployError
from rollhub.errors import ConfigError

from tests.core.deploy.stubbed_aws import (
    REGISTRY,
    ROLE,
    StubbedAws,
    created,
    detail,
    runtime_arn,
    summary,
    updated,
)

SPEC = RuntimeSpec(
    name="my_agent",
    container_uri=f"{REGISTRY}/my-agent:v1",
    role_arn=ROLE,
    description="math agent",
    environment={"LOG_LEVEL": "info"},
    idle_timeout_s=600,
    max_lifetime_s=3600,
)
RID = "my_agent-AbCdEf1234"
COMMON = {
    "agentRuntimeArtifact": {"containerConfiguration": {"containerUri": f"{REGISTRY}/my-agent:v1"}},
    "roleArn": ROLE,
    "networkConfiguration": {"networkMode": "PUBLIC"},
    "protocolConfiguration": {"serverProtocol": "HTTP"},
    "description": "math agent",
    "environmentVariables": {"LOG_LEVEL": "info"},
    "lifecycleConfiguration": {"idleRuntimeSessionTimeout": 600, "maxLifetime": 3600},
}


class Clock:
    """A manual clock: ``sleep`` advances it, so waits take no time."""

    def __init__(self) -> None:
        self.now, self.sleeps = 0.0, []

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s

    def __call__(self) -> float:
        return self.now


def test_request_is_built_from_the_spec() -> None:
    assert runtime_request(SPEC) == COMMON
    bare = RuntimeSpec(name="x", container_uri="u", role_arn=ROLE)
    assert set(runtime_request(bare)) == {
        "agentRuntimeArtifact", "roleArn", "networkConfiguration", "protocolConfiguration",
    }  # fmt: skip


def test_new_runtime_is_created_and_waited_for(aws: StubbedAws) -> None:
    stub = aws.control_stub
    stub.add_response(
        "list_agent_runtimes",
        {"agentRuntimes": [summary("other", "other-AbCdEf1234")]},
        {"maxResults": 100},
    )
    # clientToken is left to botocore, which fills the idempotency token in after the stub's check
    stub.add_response(
        "create_agent_runtime", created(RID), {"agentRuntimeName": "my_agent", **COMMON}
    )
    calls = aws.calls()
    runtime_id, arn, action = create_or_update(calls, SPEC)
    assert (runtime_id, arn, action) == (RID, runtime_arn(RID), "created")
    for status in ("CREATING", "CREATING", "READY"):
        stub.add_response("get_agent_runtime", detail(RID, status), {"agentRuntimeId": RID})
    clock = Clock()
    answer = wait_until_ready(calls, RID, timeout_s=60, poll_s=2, sleep=clock.sleep, clock=clock)
    assert answer["status"] == "READY" and clock.sleeps == [2, 2]
    aws.assert_done()
    # each status change is printed once
    assert aws.text.count("status CREATING") == 1 and "status READY" in aws.text


def test_existing_runtime_is_updated_found_on_a_later_page(aws: StubbedAws) -> None:
    stub = aws.control_stub
    stub.add_response(
        "list_agent_runtimes",
        {"agentRuntimes": [summary("a", "a-AbCdEf1234")], "nextToken": "page2"},
        {"maxResults": 100},
    )
    stub.add_response(
        "list_agent_runtimes",
        {"agentRuntimes": [summary("my_agent", RID)]},
        {"maxResults": 100, "nextToken": "page2"},
    )
    stub.add_response("update_agent_runtime", updated(RID), {"agentRuntimeId": RID, **COMMON})
    assert create_or_update(aws.calls(), SPEC) == (RID, runtime_arn(RID), "updated")
    aws.assert_done()
    assert "exists" in aws.text and "UpdateAgentRuntime" in aws.text


def test_find_runtime_returns_none_when_absent(aws: StubbedAws) -> None:
    aws.control_stub.add_response("list_agent_runtimes", {"agentRuntimes": []})
    assert find_runtime(aws.calls(), "my_agent") is None


@pytest.mark.parametrize("status", ["CREATE_FAILED", "UPDATE_FAILED", "DELETING"])
def test_failure_status_is_a_clear_error(aws: StubbedAws, status: str) -> None:
    aws.control_stub.add_response("get_agent_runtime", detail(RID, "UPDATING"))
    aws.control_stub.add_response(
        "get_agent_runtime", detail(RID, status, reason="image manifest is not linux/arm64")
    )
    clock = Clock()
    with pytest.raises(DeployError) as ei:
        wait_until_ready(aws.calls(), RID, poll_s=1, sleep=clock.sleep, clock=clock)
    assert ei.value.status == status and ei.value.runtime_id == RID
    assert f"ended in {status}: image manifest is not linux/arm64" in str(ei.value)


def test_wait_times_out(aws: StubbedAws) -> None:
    for _ in range(4):
        aws.control_stub.add_response("get_agent_runtime", detail(RID, "CREATING"))
    clock = Clock()
    with pytest.raises(DeployError, match="still CREATING after 3s") as ei:
        wait_until_ready(aws.calls(), RID, timeout_s=3, poll_s=1, sleep=clock.sleep, clock=clock)
    assert ei.value.transient and "--wait-timeout" in str(ei.value)


def test_access_denied_on_create_names_the_permissions(aws: StubbedAws) -> None:
    aws.control_stub.add_response("list_agent_runtimes", {"agentRuntimes": []})
    aws.control_stub.add_client_error(
        "create_agent_runtime", "AccessDeniedException",
        "User is not authorized to perform: iam:PassRole", 403,
    )  # fmt: skip
    with pytest.raises(DeployError) as ei:
        create_or_update(aws.calls(), SPEC)
    message = str(ei.value)
    assert "bedrock-agentcore:CreateAgentRuntime" in message
    assert "iam:PassRole on the runtime role given with --role-arn" in message
    assert "iam:PassRole" in ei.value.permissions


def test_access_denied_on_list_and_get(aws: StubbedAws) -> None:
    aws.control_stub.add_client_error("list_agent_runtimes", "AccessDeniedException", "no", 403)
    with pytest.raises(DeployError, match="needs bedrock-agentcore:ListAgentRuntimes"):
        find_runtime(aws.calls(), "x")
    aws.control_stub.add_client_error("get_agent_runtime", "AccessDeniedException", "no", 403)
    with pytest.raises(DeployError, match="needs bedrock-agentcore:GetAgentRuntime"):
        wait_until_ready(aws.calls(), RID, sleep=lambda s: None)


def test_conflict_while_updating_is_reported(aws: StubbedAws) -> None:
    aws.control_stub.add_response(
        "list_agent_runtimes", {"agentRuntimes": [summary("my_agent", RID)]}
    )
    aws.control_stub.add_client_error(
        "update_agent_runtime", "ConflictException", "runtime is being updated", 409
    )
    with pytest.raises(DeployError, match="ConflictException: runtime is being updated"):
        create_or_update(aws.calls(), SPEC)


def test_environment_flags() -> None:
    assert check_environment(["A=1", "MAX_TOKENS=512", "E="]) == {
        "A": "1", "MAX_TOKENS": "512", "E": "",
    }  # fmt: skip
    for bad in ["OPENAI_API_KEY=x", "DB_PASSWORD=x", "HF_TOKEN=x", "AWS_SECRET_ACCESS_KEY=x"]:
        with pytest.raises(ConfigError, match="looks like a secret"):
            check_environment([bad])
    for bad in ["NOEQUALS", "1X=2", "A-B=1"]:
        with pytest.raises(ConfigError, match="NAME=VALUE"):
            check_environment([bad])
