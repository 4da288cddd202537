"""The runtime side of a deployment, on ``bedrock-agentcore-control``.

A runtime is found by name (``ListAgentRuntimes``, paged by ``nextToken``); an existing one
gets ``UpdateAgentRuntime`` (a new version, same ARN), a new one ``CreateAgentRuntime``.
Both answer at once with status ``CREATING``/``UPDATING``; :func:`wait_until_ready` polls
``GetAgentRuntime`` until ``READY``, and a ``*_FAILED`` status is a :class:`DeployError`
carrying the service's ``failureReason``. botocore ships no waiter for runtimes, so the
poll is here, with the statuses taken from the service model's ``AgentRuntimeStatus``.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rollhub.deploy.aws import AwsCalls
from rollhub.deploy.errors import DeployError
from rollhub.deploy.names import role_account
from rollhub.errors import ConfigError

__all__ = [
    "FAILED_STATUSES",
    "RuntimeSpec",
    "check_environment",
    "create_or_update",
    "find_runtime",
    "runtime_request",
    "wait_until_ready",
]

log = logging.getLogger(__name__)

SERVICE = "bedrock-agentcore-control"
READY = "READY"
PENDING_STATUSES = frozenset({"CREATING", "UPDATING"})
FAILED_STATUSES = frozenset({"CREATE_FAILED", "UPDATE_FAILED", "DELETING", "DELETE_FAILED"})

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
# names that say "secret": such values belong in Secrets Manager or the request, not the runtime
_SECRET_NAME = re.compile(
    r"(^|_)(SECRET|SECRETS|PASSWORD|PASSWD|TOKEN|API_?KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIALS?)(_|$)",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class RuntimeSpec:
    """What the runtime should be.

    :param name: the runtime name (``[a-zA-Z][a-zA-Z0-9_]{0,47}``).
    :param container_uri: the ECR image URI.
    :param role_arn: the execution role AgentCore assumes to run the container.
    :param description: free text shown in the console.
    :param environment: plain (non-secret) environment variables of the container.
    :param idle_timeout_s: seconds an idle session lives (``idleRuntimeSessionTimeout``).
    :param max_lifetime_s: seconds a session lives at most (``maxLifetime``).
    """

    name: str
    container_uri: str
    role_arn: str
    description: str | None = None
    environment: Mapping[str, str] = field(default_factory=dict)
    idle_timeout_s: int | None = None
    max_lifetime_s: int | None = None


def check_environment(pairs: list[str]) -> dict[str, str]:
    """``NAME=VALUE`` strings of ``--env`` as a dict; secret-looking names are refused.

    :raises ConfigError: a malformed pair, a bad name, or a name like ``API_KEY``.
    """
    env: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not _ENV_NAME.match(name):
            raise ConfigError(f"--env {pair!r}: expected NAME=VALUE with a shell-style NAME")
        if _SECRET_NAME.search(name):
            raise ConfigError(
                f"--env {name}: looks like a secret, and runtime environment variables are "
                f"readable by anyone who can describe the runtime; the model api key reaches "
                f"the agent in each request's _rollout, and AWS access comes from the role"
            )
        env[name] = value
    return env


def runtime_request(spec: RuntimeSpec) -> dict[str, Any]:
    """The parameters Create and Update share (pure)."""
    params: dict[str, Any] = {
        "agentRuntimeArtifact": {"containerConfiguration": {"containerUri": spec.container_uri}},
        "roleArn": spec.role_arn,
        "networkConfiguration": {"networkMode": "PUBLIC"},
        "protocolConfiguration": {"serverProtocol": "HTTP"},
    }
    if spec.description:
        params["description"] = spec.description
    if spec.environment:
        params["environmentVariables"] = dict(spec.environment)
    lifecycle = {}
    if spec.idle_timeout_s is not None:
        lifecycle["idleRuntimeSessionTimeout"] = spec.idle_timeout_s
    if spec.max_lifetime_s is not None:
        lifecycle["maxLifetime"] = spec.max_lifetime_s
    if lifecycle:
        params["lifecycleConfiguration"] = lifecycle
    return params


def find_runtime(calls: AwsCalls, name: str) -> dict[str, Any] | None:
    """The ``ListAgentRuntimes`` entry named ``name``, or None (a dry run plans none)."""
    token: str | None = None
    while True:
        params: dict[str, Any] = {"maxResults": 100}
        if token:
            params["nextToken"] = token
        page = calls.call(SERVICE, "ListAgentRuntimes", params, planned={"agentRuntimes": []})
        for entry in page.get("agentRuntimes", ()):
            if entry.get("agentRuntimeName") == name:
                return dict(entry)
        token = page.get("nextToken")
        if not token:
            return None


def create_or_update(calls: AwsCalls, spec: RuntimeSpec) -> tuple[str, str, str]:
    """Create the runtime, or update the one of that name.

    :returns: ``(runtime id, runtime ARN, "created" | "updated")``.
    """
    existing = find_runtime(calls, spec.name)
    common = runtime_request(spec)
    if existing is not None:
        runtime_id = str(existing["agentRuntimeId"])
        calls.out(f"     runtime {spec.name} exists ({runtime_id}): updating it")
        answer = calls.call(
            SERVICE,
            "UpdateAgentRuntime",
            {"agentRuntimeId": runtime_id, **common},
            resource=spec.name,
        )
        return runtime_id, str(answer["agentRuntimeArn"]), "updated"
    if calls.dry_run:
        calls.out(
            f"     (dry run: CreateAgentRuntime is sent when no runtime is named {spec.name}; "
            f"else UpdateAgentRuntime with its agentRuntimeId and the same settings)"
        )
    planned_id = f"{spec.name}-XXXXXXXXXX"
    account = role_account(spec.role_arn) or "<account>"
    answer = calls.call(
        SERVICE,
        "CreateAgentRuntime",
        {"agentRuntimeName": spec.name, **common},
        planned={
            "agentRuntimeId": planned_id,
            "agentRuntimeArn": f"arn:aws:bedrock-agentcore:{calls.region}:{account}:runtime/{planned_id}",
        },
        resource=spec.name,
    )
    return str(answer["agentRuntimeId"]), str(answer["agentRuntimeArn"]), "created"


def wait_until_ready(
    calls: AwsCalls,
    runtime_id: str,
    *,
    timeout_s: float = 900.0,
    poll_s: float = 5.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """Poll ``GetAgentRuntime`` until the runtime is ``READY``; return the last answer.

    :raises DeployError: a failure status (with the service's ``failureReason``), an
        unknown status, or no ``READY`` within ``timeout_s``.
    """
    params = {"agentRuntimeId": runtime_id}
    if calls.dry_run:
        calls.out(
            f"  -> {SERVICE} GetAgentRuntime {json.dumps(params)} every {poll_s:g}s until READY"
        )
        calls.call(SERVICE, "GetAgentRuntime", params, show=False)
        return {"agentRuntimeId": runtime_id, "status": READY}
    calls.out(
        f"  -> {SERVICE} GetAgentRuntime {json.dumps(params)} until READY (timeout {timeout_s:g}s)"
    )
    deadline = clock() + timeout_s
    last = ""
    while True:
        answer = calls.call(SERVICE, "GetAgentRuntime", params, resource=runtime_id, show=False)
        status = str(answer.get("status", ""))
        if status != last:
            calls.out(f"     status {status} (version {answer.get('agentRuntimeVersion', '?')})")
            last = status
        if status == READY:
            return dict(answer)
        if status in FAILED_STATUSES:
            reason = answer.get("failureReason") or "no reason given"
            raise DeployError(
                f"runtime {runtime_id} ended in {status}: {reason}",
                step="wait",
                operation="GetAgentRuntime",
                status=status,
                runtime_id=runtime_id,
            )
        if status not in PENDING_STATUSES:
            raise DeployError(
                f"runtime {runtime_id} has status {status!r}, which rollhub does not know",
                step="wait",
                operation="GetAgentRuntime",
                status=status,
                runtime_id=runtime_id,
            )
        if clock() >= deadline:
            raise DeployError(
                f"runtime {runtime_id} is still {status} after {timeout_s:g}s; check it in the "
                f"console or run the deploy again with a larger --wait-timeout",
                step="wait",
                operation="GetAgentRuntime",
                status=status,
                runtime_id=runtime_id,
                transient=True,
            )
        sleep(poll_s)
