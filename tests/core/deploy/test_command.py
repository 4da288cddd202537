"""``rollhub deploy`` through the real CLI entry point: output, exit codes, one-line errors."""

from __future__ import annotations

import base64
import importlib.metadata
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest
from rollhub import cli
from rollhub.deploy import wheels as wheels_module
from rollhub.deploy.aws import AwsCalls
from rollhub.deploy.dockerfile import inspect_project, render_agent_dockerfile

from tests.core.deploy.fake_tool import FakeTool
from tests.core.deploy.stubbed_aws import (
    CONTROL,
    REGION,
    REGISTRY,
    ROLE,
    StubbedAws,
    created,
    detail,
    runtime_arn,
)

AGENT = ["--image-tag", "my-agent:v1", "--role-arn", ROLE, "--region", REGION]


@pytest.fixture(autouse=True)
def deploy_command(monkeypatch: pytest.MonkeyPatch) -> None:
    """Register the subcommand the way rollhub.cli.COMMANDS lists the others."""
    monkeypatch.setitem(
        cli.COMMANDS, "deploy", ("rollhub.commands.deploy", "ship agents to AgentCore Runtime")
    )
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    for sub in ("init", "agentcore", "sandbox"):
        with pytest.raises(SystemExit) as ei:
            cli.main(["deploy", sub, "--help"])
        assert ei.value.code == 0
        assert "usage: rollhub deploy" in capsys.readouterr().out


def test_init_writes_dockerfile_and_refuses_to_overwrite(
    agent_project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["deploy", "init", "--project", str(agent_project)]) == 0
    out = capsys.readouterr().out
    assert "dependencies via uv" in out and "warning" not in out
    assert (agent_project / "Dockerfile").read_text().startswith("# syntax=docker/dockerfile:1")
    assert ".env" in (agent_project / ".dockerignore").read_text()
    assert cli.main(["deploy", "init", "--project", str(agent_project)]) == 2
    assert "pass --force" in capsys.readouterr().err
    assert cli.main(["deploy", "init", "--project", str(agent_project), "--force"]) == 0
    assert "kept the existing" in capsys.readouterr().out


def test_agentcore_dry_run_prints_the_plan_and_the_toml(
    agent_project: Path, fake_tool: FakeTool, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["deploy", "init", "--project", str(agent_project)]) == 0
    capsys.readouterr()
    argv = ["deploy", "agentcore", "--project", str(agent_project), *AGENT, "--dry-run"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert f"build {REGISTRY}/my-agent:v1 for linux/arm64" in out
    assert "bedrock-agentcore-control CreateAgentRuntime" in out
    assert '[runtime]\nname = "agentcore"\nruntime_arn = "arn:aws:bedrock-agentcore:' in out
    assert fake_tool.records() == []


@pytest.fixture
def requirements_project(tmp_path: Path) -> Path:
    """An agent whose requirements.txt names rollhub (not on the public index)."""
    root = tmp_path / "req-agent"
    root.mkdir()
    (root / "requirements.txt").write_text("rollhub[s3]>=0.1\nopenai>=1.40\n")
    (root / "agent.py").write_text("from rollhub.app import RolloutApp\n\napp = RolloutApp()\n")
    return root


def test_init_bundles_the_rollhub_this_process_runs(
    requirements_project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, version = requirements_project, importlib.metadata.version("rollhub")
    assert cli.main(["deploy", "init", "--project", str(root)]) == 0
    out = capsys.readouterr().out
    wheel = root / "wheels" / f"rollhub-{version}-py3-none-any.whl"
    assert sorted(p.name for p in (root / "wheels").iterdir()) == ["constraints.txt", wheel.name]
    assert f"rollhub=={version}" in (root / "wheels/constraints.txt").read_text().splitlines()
    assert f"rollhub (rollhub[s3]>=0.1): bundled in {root / 'wheels'}: {version} built from" in out
    # the wheel holds the code this process imports (a checkout's, when one shadows the install)
    with zipfile.ZipFile(wheel) as whl:
        assert whl.read("rollhub/deploy/wheels.py") == Path(wheels_module.__file__).read_bytes()
    text = (root / "Dockerfile").read_text()
    assert "COPY wheels/ ./wheels/" in text
    assert (
        "RUN pip install --find-links ./wheels -c ./wheels/constraints.txt -r requirements.txt"
        in text
    )
    # a pin to a published release keeps the index, and the bundled wheel goes
    (root / "requirements.txt").write_text("rollhub==0.3.0\n")
    assert cli.main(["deploy", "init", "--project", str(root), "--force"]) == 0
    assert (
        "rollhub (rollhub==0.3.0): not bundled: rollhub==0.3.0 is pinned" in capsys.readouterr().out
    )
    assert sorted(p.name for p in (root / "wheels").iterdir()) == ["constraints.txt"]
    assert "==" not in (root / "wheels/constraints.txt").read_text()


def test_init_with_a_lock_bundles_nothing(
    agent_project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["deploy", "init", "--project", str(agent_project)]) == 0
    assert "as uv's lock says" in capsys.readouterr().out
    assert not (agent_project / "wheels").exists()
    assert "--find-links" not in (agent_project / "Dockerfile").read_text()


def test_agentcore_refreshes_the_wheels_before_the_build(
    requirements_project: Path,
    stubbed_clients: StubbedAws,
    fake_tool: FakeTool,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root, version = requirements_project, importlib.metadata.version("rollhub")
    project = inspect_project(root, app="agent.py:app")
    (root / "Dockerfile").write_text(render_agent_dockerfile(project))
    # a dry run says what it would bundle and writes nothing
    assert cli.main(["deploy", "agentcore", "--project", str(root), *AGENT, "--dry-run"]) == 0
    assert "rollhub (rollhub[s3]>=0.1): would bundle in" in capsys.readouterr().out
    assert not (root / "wheels").exists()
    aws, rid = stubbed_clients, "my_agent-AbCdEf1234"
    aws.ecr_stub.add_response(
        "describe_repositories", {"repositories": [{"repositoryName": "my-agent"}]}
    )
    token = base64.b64encode(b"AWS:pw").decode()
    aws.ecr_stub.add_response(
        "get_authorization_token",
        {
            "authorizationData": [
                {"authorizationToken": token, "proxyEndpoint": f"https://{REGISTRY}"}
            ]
        },
    )
    aws.control_stub.add_response("list_agent_runtimes", {"agentRuntimes": []})
    aws.control_stub.add_response("create_agent_runtime", created(rid))
    argv = ["deploy", "agentcore", "--project", str(root), *AGENT, "--no-wait"]
    assert cli.main(argv) == 0
    aws.assert_done()
    build = fake_tool.records()[0]
    assert build["wheels"] == ["constraints.txt", f"rollhub-{version}-py3-none-any.whl"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--role-arn", "arn:aws:iam::1:user/x"], "--role-arn"),
        (["--env", "OPENAI_API_KEY=sk"], "looks like a secret"),
        (["--region", "eu-west-1", "--image-tag", f"{REGISTRY}/ab:1"], "differs from the region"),
        (["--runtime-name", "bad-name"], "--runtime-name"),
        (["--wait-timeout", "0"], "--wait-timeout"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    agent_project: Path,
    fake_tool: FakeTool,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    message: str,
) -> None:
    (agent_project / "Dockerfile").write_text("FROM --platform=linux/arm64 x\n")
    argv = ["deploy", "agentcore", "--project", str(agent_project), *AGENT, *extra, "--dry-run"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rollhub: error: ") and message in err and "\n" not in err


def test_missing_dockerfile_and_missing_tool(
    agent_project: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["deploy", "agentcore", "--project", str(agent_project), *AGENT]
    assert cli.main([*argv, "--dry-run"]) == 2
    assert "rollhub deploy init" in capsys.readouterr().err
    (agent_project / "Dockerfile").write_text("FROM --platform=linux/arm64 x\n")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    # a real run stops before any AWS call; a dry run still shows the plan, with a warning
    assert cli.main(argv) == 2
    assert "no container tool found" in capsys.readouterr().err
    assert cli.main([*argv, "--container-tool", "no-such-tool"]) == 2
    assert "--container-tool 'no-such-tool' was not found" in capsys.readouterr().err
    assert cli.main([*argv, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("warning: no container tool found") and "$ docker build" in out
    # an image already in ECR needs no tool at all
    assert cli.main([*argv, "--no-push", "--dry-run"]) == 0
    assert "warning" not in capsys.readouterr().out


def test_region_from_the_environment(
    agent_project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "deploy",
        "agentcore",
        "--image-tag",
        "ab:1",
        "--role-arn",
        ROLE,
        "--no-push",
        "--dry-run",
    ]
    assert cli.main(argv) == 2
    assert "no AWS region" in capsys.readouterr().err
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-central-1")
    assert cli.main(argv) == 0
    assert "region eu-central-1" in capsys.readouterr().out


@pytest.fixture
def stubbed_clients(aws: StubbedAws, monkeypatch: pytest.MonkeyPatch) -> StubbedAws:
    """AwsCalls hands out the stubbed clients instead of making boto3 ones."""
    clients = {"ecr": aws.ecr, CONTROL: aws.control}
    monkeypatch.setattr(AwsCalls, "client", lambda self, service: clients[service])
    return aws


@pytest.mark.parametrize("own_context", [True, False])
def test_sandbox_deploy_end_to_end(
    stubbed_clients: StubbedAws,
    fake_tool: FakeTool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    own_context: bool,
) -> None:
    aws, rid = stubbed_clients, "sbx-AbCdEf1234"
    aws.ecr_stub.add_response(
        "describe_repositories", {"repositories": [{"repositoryName": "sbx"}]}
    )
    token = base64.b64encode(b"AWS:pw").decode()
    aws.ecr_stub.add_response(
        "get_authorization_token",
        {
            "authorizationData": [
                {"authorizationToken": token, "proxyEndpoint": f"https://{REGISTRY}"}
            ]
        },
    )
    aws.control_stub.add_response("list_agent_runtimes", {"agentRuntimes": []})
    aws.control_stub.add_response("create_agent_runtime", created(rid))
    aws.control_stub.add_response("get_agent_runtime", detail(rid, "READY"))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    ctx = tmp_path / "ctx"
    argv = ["deploy", "sandbox", "--base-image", "python:3.11-slim", "--image-tag", "sbx:v1",
            "--role-arn", ROLE, "--region", REGION, "--poll-interval", "0.01"]  # fmt: skip
    assert cli.main([*argv, "--context-dir", str(ctx)] if own_context else argv) == 0
    aws.assert_done()
    out = capsys.readouterr().out
    assert f'options = {{ runtime_arn = "{runtime_arn(rid)}" }}' in out
    assert "[plugins.sandbox]" in out and f"runtime sbx created: {runtime_arn(rid)}" in out
    build = fake_tool.records()[0]
    assert build["context_files"] == ["Dockerfile", "shim.c"]
    assert "FROM --platform=linux/arm64 python:3.11-slim" in build["dockerfile"]
    # a context of its own is kept for the user; a temporary one is removed
    assert ctx.is_dir() == own_context and list(scratch.iterdir()) == []


def test_sandbox_dry_run_writes_nothing(
    fake_tool: FakeTool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    before = sorted(tmp_path.iterdir())
    argv = ["deploy", "sandbox", "--base-image", "busybox:1.36", "--image-tag", "sbx:v1",
            "--role-arn", ROLE, "--region", REGION, "--dry-run"]  # fmt: skip
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "would be written to" in out and "[plugins.sandbox]" in out
    assert sorted(tmp_path.iterdir()) == before and fake_tool.records() == []
    assert cli.main([*argv[:2], "--base-image", "-v /:/x", *argv[4:]]) == 2
    assert "--base-image" in capsys.readouterr().err


def test_access_denied_exits_1_naming_the_permission(
    stubbed_clients: StubbedAws, agent_project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stubbed_clients.control_stub.add_client_error(
        "list_agent_runtimes", "AccessDeniedException", "not authorized", 403
    )
    argv = ["deploy", "agentcore", "--project", str(agent_project), *AGENT, "--no-push"]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("rollhub: error: access denied on bedrock-agentcore-control")
    assert "needs bedrock-agentcore:ListAgentRuntimes" in err and "\n" not in err


def test_importing_deploy_loads_no_aws_sdk() -> None:
    code = (
        "import sys, rollhub.commands.deploy, rollhub.deploy.deployer, rollhub.deploy.aws; "
        "bad = [m for m in ('boto3', 'botocore') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
