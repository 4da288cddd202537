"""Fixtures of the deploy tests: real botocore clients under ``Stubber``, a fake container CLI.

Every AWS request goes to a real botocore client whose ``Stubber`` checks the parameters
against the service model (as a real call would) and answers with responses that botocore
also validates against the model's output shapes.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import botocore.session
import pytest
from botocore.stub import Stubber
from rollhub.deploy.aws import AwsCalls

REGION = "us-west-2"
ACCOUNT = "123456789012"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/AgentRuntimeRole"
REGISTRY = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com"
FAKE_TOOL = Path(__file__).with_name("fake_container_tool.py")
CONTROL = "bedrock-agentcore-control"
WHEN = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def runtime_arn(runtime_id: str) -> str:
    return f"arn:aws:bedrock-agentcore:{REGION}:{ACCOUNT}:runtime/{runtime_id}"


def summary(name: str, runtime_id: str, status: str = "READY") -> dict[str, Any]:
    """One ``ListAgentRuntimes`` entry (every member the output shape requires)."""
    return {
        "agentRuntimeArn": runtime_arn(runtime_id),
        "agentRuntimeId": runtime_id,
        "agentRuntimeVersion": "1",
        "agentRuntimeName": name,
        "description": "an agent",
        "lastUpdatedAt": WHEN,
        "status": status,
    }


def detail(runtime_id: str, status: str, *, version: str = "1", reason: str | None = None) -> dict:
    """A ``GetAgentRuntime`` answer."""
    answer: dict[str, Any] = {
        "agentRuntimeArn": runtime_arn(runtime_id),
        "agentRuntimeName": runtime_id.rsplit("-", 1)[0],
        "agentRuntimeId": runtime_id,
        "agentRuntimeVersion": version,
        "createdAt": WHEN,
        "lastUpdatedAt": WHEN,
        "roleArn": ROLE,
        "status": status,
        "lifecycleConfiguration": {"idleRuntimeSessionTimeout": 900, "maxLifetime": 28800},
    }
    if reason:
        answer["failureReason"] = reason
    return answer


def created(runtime_id: str, status: str = "CREATING") -> dict[str, Any]:
    """A ``CreateAgentRuntime`` answer."""
    return {
        "agentRuntimeArn": runtime_arn(runtime_id),
        "agentRuntimeId": runtime_id,
        "agentRuntimeVersion": "1",
        "createdAt": WHEN,
        "status": status,
    }


def updated(runtime_id: str, version: str = "2") -> dict[str, Any]:
    """An ``UpdateAgentRuntime`` answer."""
    return {
        "agentRuntimeArn": runtime_arn(runtime_id),
        "agentRuntimeId": runtime_id,
        "agentRuntimeVersion": version,
        "createdAt": WHEN,
        "lastUpdatedAt": WHEN,
        "status": "UPDATING",
    }


@dataclass
class StubbedAws:
    """Real ``ecr`` and ``bedrock-agentcore-control`` clients, each under a Stubber."""

    ecr: Any
    control: Any
    ecr_stub: Stubber
    control_stub: Stubber
    lines: list[str] = field(default_factory=list)

    def calls(self, *, dry_run: bool = False) -> AwsCalls:
        return AwsCalls(
            region=REGION,
            clients={"ecr": self.ecr, CONTROL: self.control},
            dry_run=dry_run,
            out=self.lines.append,
        )

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def assert_done(self) -> None:
        self.ecr_stub.assert_no_pending_responses()
        self.control_stub.assert_no_pending_responses()


@pytest.fixture(scope="session")
def botocore_session() -> botocore.session.Session:
    """One session for all tests: its loader caches the service models between clients."""
    return botocore.session.get_session()


@pytest.fixture
def aws(botocore_session: botocore.session.Session) -> Iterator[StubbedAws]:
    session = botocore_session
    kwargs = {
        "region_name": REGION,
        "aws_access_key_id": "AKIDEXAMPLE",
        "aws_secret_access_key": "not-a-secret",
    }
    ecr = session.create_client("ecr", **kwargs)
    control = session.create_client(CONTROL, **kwargs)
    with Stubber(ecr) as ecr_stub, Stubber(control) as control_stub:
        yield StubbedAws(ecr, control, ecr_stub, control_stub)


@dataclass
class FakeTool:
    """The fake container CLI installed as ``docker`` on a PATH without the real one."""

    path: Path
    log: Path

    def records(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]


@pytest.fixture
def fake_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeTool:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    tool = bindir / "docker"
    tool.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_TOOL}" "$@"\n')
    tool.chmod(0o755)
    log = tmp_path / "tool.jsonl"
    monkeypatch.setenv("PATH", os.pathsep.join([str(bindir), "/usr/bin", "/bin"]))
    monkeypatch.setenv("FAKE_TOOL_LOG", str(log))
    monkeypatch.delenv("FAKE_TOOL_FAIL", raising=False)
    return FakeTool(path=tool, log=log)


@pytest.fixture
def agent_project(tmp_path: Path) -> Path:
    """A minimal agent project: pyproject naming rollhub, a uv.lock, agent.py."""
    root = tmp_path / "agent"
    root.mkdir()
    (root / "pyproject.toml").write_text(
        '[project]\nname = "my-agent"\nversion = "0.1.0"\nrequires-python = ">=3.11"\n'
        'dependencies = ["rollhub>=0.1", "openai>=1.40"]\n'
    )
    (root / "uv.lock").write_text("version = 1\n")
    (root / "agent.py").write_text("from rollhub.app import RolloutApp\n\napp = RolloutApp()\n")
    return root
