"""AWS for the deploy tests: the account, region and role they use, AgentCore control-plane
answers shaped as the service model requires, and :class:`StubbedAws`, real botocore
clients under ``Stubber`` (the ``aws`` fixture)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from botocore.stub import Stubber
from rollhub.deploy.aws import AwsCalls

REGION = "us-west-2"
ACCOUNT = "123456789012"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/AgentRuntimeRole"
REGISTRY = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com"
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
