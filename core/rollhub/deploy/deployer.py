"""One deployment, step by step: build, repository, login, push, runtime, wait.

Each step prints what it does before doing it: container commands as shell lines, AWS
requests with their parameters (through :class:`~rollhub.deploy.aws.AwsCalls`). A dry run
walks the same steps and sends nothing, so its output is the plan of the real run.
"""

from __future__ import annotations

import logging
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rollhub.deploy.agentcore_control import RuntimeSpec, create_or_update, wait_until_ready
from rollhub.deploy.aws import AwsCalls
from rollhub.deploy.container import ContainerTool
from rollhub.deploy.ecr import ensure_repository, registry_login
from rollhub.deploy.names import ImageRef
from rollhub.errors import UsageError

__all__ = ["DeployPlan", "DeployResult", "deploy"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeployPlan:
    """Everything a deployment does, decided before the first step runs.

    :param image: the ECR image (its URI is the runtime's ``containerUri``).
    :param runtime: the runtime to create or update.
    :param tool: the container tool; None with ``push=False`` (the image is in ECR already).
    :param dockerfile: the Dockerfile to build; None skips the build (``--no-build``).
    :param context: the build context directory.
    :param push: push the image to ECR (False: ``--no-push``).
    :param wait: poll until the runtime is READY.
    :param wait_timeout_s: how long to wait for READY.
    :param poll_s: seconds between ``GetAgentRuntime`` polls.
    """

    image: ImageRef
    runtime: RuntimeSpec
    tool: ContainerTool | None
    dockerfile: Path | None
    context: Path | None
    push: bool = True
    wait: bool = True
    wait_timeout_s: float = 900.0
    poll_s: float = 5.0

    def __post_init__(self) -> None:
        if self.dockerfile is not None and not self.push:
            raise UsageError("a deployment that builds an image must also push it (drop --no-push)")
        if (self.push or self.dockerfile is not None) and self.tool is None:
            raise UsageError("building or pushing needs a container tool")


@dataclass(frozen=True)
class DeployResult:
    """What a deployment produced: the runtime's ARN and id, whether it was created or updated."""

    runtime_arn: str
    runtime_id: str
    action: str
    version: str | None = None


def deploy(
    plan: DeployPlan,
    calls: AwsCalls,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> DeployResult:
    """Run ``plan`` (or, with ``calls.dry_run``, print it); see the module docstring.

    :raises DeployError: a step failed; the message names the step and, for access denied,
        the IAM permission that is missing.
    """
    out, dry = calls.out, calls.dry_run
    step = 0

    def header(text: str) -> None:
        nonlocal step
        step += 1
        out(f"{step}. {text}")

    def run(argv: list[str], name: str, stdin: str | None = None, shown: str | None = None) -> None:
        out(f"  $ {shown or shlex.join(argv)}")
        if not dry:
            assert plan.tool is not None
            plan.tool.run(argv, step=name, stdin=stdin)

    if dry:
        out(f"dry run: nothing is built, pushed or sent to AWS (region {calls.region})")
    uri = plan.image.uri
    if plan.dockerfile is not None:
        assert plan.tool is not None and plan.context is not None
        header(f"build {uri} for linux/arm64 with {plan.tool.name}")
        run(
            plan.tool.build_argv(image=uri, dockerfile=plan.dockerfile, context=plan.context),
            "build",
        )
    if plan.push:
        assert plan.tool is not None
        header(f"ECR repository {plan.image.repository} in account {plan.image.account}")
        ensure_repository(calls, plan.image)
        header(f"log {plan.tool.name} in to {plan.image.registry}")
        login = registry_login(calls, plan.image)
        argv = plan.tool.login_argv(login.registry, login.username)
        run(argv, "login", stdin=login.password, shown=f"{shlex.join(argv)} < (ECR password)")
        header(f"push {uri}")
        run(plan.tool.push_argv(uri), "push")
    header(f"AgentCore runtime {plan.runtime.name}")
    runtime_id, arn, action = create_or_update(calls, plan.runtime)
    version = None
    if plan.wait:
        header(f"wait until runtime {plan.runtime.name} is READY")
        answer = wait_until_ready(
            calls, runtime_id, timeout_s=plan.wait_timeout_s, poll_s=plan.poll_s,
            sleep=sleep, clock=clock,
        )  # fmt: skip
        version = answer.get("agentRuntimeVersion")
        arn = str(answer.get("agentRuntimeArn") or arn)
    log.info("runtime %s %s: %s", plan.runtime.name, action, arn)
    return DeployResult(runtime_arn=arn, runtime_id=runtime_id, action=action, version=version)
