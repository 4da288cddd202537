"""A whole deployment: the fake container CLI records the commands, Stubber answers AWS."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from rollhub.deploy.agentcore_control import RuntimeSpec
from rollhub.deploy.container import ContainerTool, find_container_tool
from rollhub.deploy.deployer import DeployPlan, deploy
from rollhub.deploy.dockerfile import inspect_project, render_agent_dockerfile
from rollhub.deploy.errors import DeployError
from rollhub.deploy.names import ImageRef
from rollhub.errors import ConfigError, UsageError

from tests.core.deploy.fake_tool import FakeTool
from tests.core.deploy.stubbed_aws import (
    ACCOUNT,
    REGION,
    REGISTRY,
    ROLE,
    WHEN,
    StubbedAws,
    created,
    detail,
    runtime_arn,
    summary,
    updated,
)

IMAGE = ImageRef(account=ACCOUNT, region=REGION, repository="my-agent", tag="v1")
URI = f"{REGISTRY}/my-agent:v1"
RID = "my_agent-AbCdEf1234"
TOKEN = base64.b64encode(b"AWS:ecr-password-123").decode()


def _plan(project: Path, tool: ContainerTool | None, **kw) -> DeployPlan:
    dockerfile = project / "Dockerfile"
    dockerfile.write_text(render_agent_dockerfile(inspect_project(project, app="agent.py")))
    defaults = dict(
        image=IMAGE,
        runtime=RuntimeSpec(name="my_agent", container_uri=URI, role_arn=ROLE),
        tool=tool,
        dockerfile=dockerfile,
        context=project,
        poll_s=0.0,
    )
    return DeployPlan(**{**defaults, **kw})


def _stub_ecr(aws: StubbedAws, *, exists: bool) -> None:
    if exists:
        repo = {
            "repositoryName": "my-agent",
            "repositoryUri": f"{REGISTRY}/my-agent",
            "registryId": ACCOUNT,
            "createdAt": WHEN,
        }
        aws.ecr_stub.add_response("describe_repositories", {"repositories": [repo]})
    else:
        aws.ecr_stub.add_client_error(
            "describe_repositories", "RepositoryNotFoundException", http_status_code=400
        )
        aws.ecr_stub.add_response(
            "create_repository", {"repository": {"repositoryName": "my-agent"}}
        )
    aws.ecr_stub.add_response(
        "get_authorization_token",
        {
            "authorizationData": [
                {"authorizationToken": TOKEN, "proxyEndpoint": f"https://{REGISTRY}"}
            ]
        },
    )


def test_first_deploy_builds_pushes_creates_and_waits(
    aws: StubbedAws, fake_tool: FakeTool, agent_project: Path
) -> None:
    _stub_ecr(aws, exists=False)
    aws.control_stub.add_response("list_agent_runtimes", {"agentRuntimes": []})
    aws.control_stub.add_response("create_agent_runtime", created(RID))
    aws.control_stub.add_response("get_agent_runtime", detail(RID, "CREATING"))
    aws.control_stub.add_response("get_agent_runtime", detail(RID, "READY"))
    tool = find_container_tool()
    assert tool.name == "docker" and tool.executable == str(fake_tool.path)
    result = deploy(_plan(agent_project, tool), aws.calls(), sleep=lambda s: None)
    aws.assert_done()
    assert (result.runtime_arn, result.action, result.version) == (runtime_arn(RID), "created", "1")

    build, login, push = fake_tool.records()
    dockerfile = str(agent_project / "Dockerfile")
    assert build["argv"] == [
        "build",
        "--platform",
        "linux/arm64",
        "-t",
        URI,
        "-f",
        dockerfile,
        str(agent_project),
    ]
    assert "agent.py" in build["context_files"] and "USER 10001" in build["dockerfile"]
    # the password arrives on stdin, never in argv or on the console
    assert login["argv"] == [
        "login",
        "--username",
        "AWS",
        "--password-stdin",
        f"https://{REGISTRY}",
    ]
    assert login["stdin"] == "ecr-password-123"
    assert "ecr-password-123" not in aws.text
    assert push["argv"] == ["push", URI]
    steps = [line for line in aws.lines if line[:1].isdigit()]
    assert [s.split(" ", 2)[1] for s in steps] == [
        "build",
        "ECR",
        "log",
        "push",
        "AgentCore",
        "wait",
    ]


def test_redeploy_updates_the_existing_runtime(
    aws: StubbedAws, fake_tool: FakeTool, agent_project: Path
) -> None:
    _stub_ecr(aws, exists=True)
    aws.control_stub.add_response(
        "list_agent_runtimes", {"agentRuntimes": [summary("my_agent", RID)]}
    )
    aws.control_stub.add_response("update_agent_runtime", updated(RID, "2"))
    aws.control_stub.add_response("get_agent_runtime", detail(RID, "UPDATING", version="2"))
    aws.control_stub.add_response("get_agent_runtime", detail(RID, "READY", version="2"))
    result = deploy(_plan(agent_project, find_container_tool()), aws.calls(), sleep=lambda s: None)
    aws.assert_done()
    assert (result.action, result.version, result.runtime_id) == ("updated", "2", RID)
    assert "CreateRepository" not in aws.text


def test_push_denied_names_the_ecr_permissions(
    aws: StubbedAws, fake_tool: FakeTool, agent_project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "FAKE_TOOL_FAIL",
        "push=denied: User: arn:aws:iam::123456789012:user/ci is not authorized to perform: "
        "ecr:InitiateLayerUpload",
    )
    _stub_ecr(aws, exists=True)
    with pytest.raises(DeployError) as ei:
        deploy(_plan(agent_project, find_container_tool()), aws.calls())
    assert ei.value.step == "push" and "ecr:PutImage" in ei.value.permissions
    assert "ecr:InitiateLayerUpload" in str(ei.value)
    aws.assert_done()  # nothing was sent to the runtime API after the failed push


def test_build_failure_stops_before_aws(
    aws: StubbedAws, fake_tool: FakeTool, agent_project: Path
) -> None:
    plan = _plan(agent_project, find_container_tool())
    (agent_project / "Dockerfile").unlink()
    with pytest.raises(DeployError, match="docker build failed with exit code 1") as ei:
        deploy(plan, aws.calls())
    assert ei.value.step == "build"
    assert "-> ecr" not in aws.text


def test_no_push_registers_an_image_already_in_ecr(aws: StubbedAws, agent_project: Path) -> None:
    aws.control_stub.add_response("list_agent_runtimes", {"agentRuntimes": []})
    aws.control_stub.add_response("create_agent_runtime", created(RID))
    plan = _plan(agent_project, None, dockerfile=None, context=None, push=False, wait=False)
    result = deploy(plan, aws.calls())
    aws.assert_done()
    assert result.action == "created" and result.version is None


def test_dry_run_sends_nothing_and_shows_every_request(
    aws: StubbedAws, fake_tool: FakeTool, agent_project: Path
) -> None:
    # no stubbed responses: any request that reached a client would fail the test
    result = deploy(_plan(agent_project, find_container_tool()), aws.calls(dry_run=True))
    aws.assert_done()
    assert fake_tool.records() == []
    text = aws.text
    for request in (
        "ecr DescribeRepositories",
        "ecr CreateRepository",
        "ecr GetAuthorizationToken",
        "ListAgentRuntimes",
        "CreateAgentRuntime",
        "GetAgentRuntime",
    ):
        assert request in text, request
    assert "$ " + str(fake_tool.path) + " build --platform linux/arm64" in text
    assert "--password-stdin" in text and "(ECR password)" in text
    assert result.runtime_arn.startswith(f"arn:aws:bedrock-agentcore:{REGION}:{ACCOUNT}:runtime/")


def test_requests_are_validated_against_the_service_model(
    aws: StubbedAws, agent_project: Path
) -> None:
    spec = RuntimeSpec(name="my_agent", container_uri=URI, role_arn=ROLE, idle_timeout_s=5)
    plan = _plan(agent_project, None, runtime=spec, dockerfile=None, context=None, push=False)
    # a dry run checks with botocore's validator; a real call is refused by botocore itself
    for dry in (True, False):
        if not dry:
            aws.control_stub.add_response("list_agent_runtimes", {"agentRuntimes": []})
            aws.control_stub.add_response("create_agent_runtime", created(RID))
        with pytest.raises(ConfigError) as ei:
            deploy(plan, aws.calls(dry_run=dry))
        message = str(ei.value)
        assert "CreateAgentRuntime request is invalid" in message
        assert "idleRuntimeSessionTimeout" in message and "\n" not in message


def test_plan_consistency(agent_project: Path) -> None:
    with pytest.raises(UsageError, match="--no-push"):
        _plan(agent_project, ContainerTool("docker", "/x"), push=False)
    with pytest.raises(UsageError, match="container tool"):
        _plan(agent_project, None)


def test_tool_lookup(tmp_path: Path) -> None:
    bindir = tmp_path / "b"
    bindir.mkdir()
    for name in ("podman", "finch"):
        (bindir / name).write_text("#!/bin/sh\n")
        (bindir / name).chmod(0o755)
    assert find_container_tool(path=str(bindir)).name == "finch"  # docker, finch, podman order
    assert find_container_tool("podman", path=str(bindir)).name == "podman"
    with pytest.raises(UsageError, match="--container-tool 'docker'"):
        find_container_tool("docker", path=str(bindir))
    with pytest.raises(UsageError, match="--no-build"):
        find_container_tool(path=str(tmp_path / "empty"))
