"""``rollhub deploy``: ship an agent (or a sandbox image) to AWS Bedrock AgentCore Runtime.

- ``rollhub deploy init``: write a Dockerfile and .dockerignore for a ``RolloutApp`` agent,
  and the wheels of the rollhub distributions it uses into ``wheels/``.
- ``rollhub deploy agentcore --image-tag REPO:TAG --role-arn ARN``: refresh those wheels,
  build (linux/arm64), push to ECR, create or update the runtime, wait until READY, print
  its ARN.
- ``rollhub deploy sandbox --base-image IMAGE --image-tag … --role-arn …``: the same for
  any image wrapped with the sandbox health shim.

``--dry-run`` prints every step and AWS request and sends nothing. See
docs/deploy-agentcore.md.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from rollhub.errors import ConfigError, UsageError

if TYPE_CHECKING:
    from rollhub.deploy.container import ContainerTool

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare this subcommand's arguments."""
    sub = parser.add_subparsers(dest="deploy_command", metavar="ACTION", required=True)
    init = sub.add_parser(
        "init",
        help="write a Dockerfile and .dockerignore for an agent that uses RolloutApp",
        description="Write a Dockerfile (linux/arm64, non-root, port 8080) and .dockerignore "
        "into the agent's project; dependencies come from the project's own files, rollhub "
        "from wheels put into PROJECT/wheels (it is not on the public package index).",
    )
    init.add_argument("--project", default=".", help="the agent project directory (default .)")
    init.add_argument(
        "--app", default="agent.py:app", help="path/to/agent.py:app or package.module:app"
    )
    init.add_argument("--python", default=None, help="Python version of the base image (3.12)")
    init.add_argument("--force", action="store_true", help="overwrite an existing Dockerfile")

    agent = sub.add_parser(
        "agentcore",
        help="build, push and create/update an AgentCore runtime for the agent",
        description="Build the agent's image for linux/arm64, push it to ECR and create or "
        "update the AgentCore runtime; prints the runtime ARN for rollhub.toml.",
    )
    agent.add_argument("--project", default=".", help="build context (default .)")
    agent.add_argument("--dockerfile", default=None, help="default: PROJECT/Dockerfile")
    _common_arguments(agent)

    sandbox = sub.add_parser(
        "sandbox",
        help="wrap an image with the sandbox health shim and register it as a runtime",
        description="Add the rollhub health shim to any image, push it to ECR and create or "
        "update an AgentCore runtime that serves as a sandbox.",
    )
    sandbox.add_argument("--base-image", required=True, help="the task image to wrap")
    sandbox.add_argument("--shim-source", default=None, help="path to sandbox/shim/shim.c")
    sandbox.add_argument(
        "--context-dir", default=None, help="write the build context here (default: a temp dir)"
    )
    _common_arguments(sandbox)


def _common_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--image-tag",
        required=True,
        help="REPO[:TAG], or ACCOUNT.dkr.ecr.REGION.amazonaws.com/REPO[:TAG]",
    )
    p.add_argument("--role-arn", required=True, help="the runtime's execution role")
    p.add_argument("--runtime-name", default=None, help="default: from the repository name")
    p.add_argument("--region", default=None, help="default: AWS_REGION or the profile's region")
    p.add_argument("--profile", default=None, help="AWS profile (default: the usual chain)")
    p.add_argument("--container-tool", default=None, help="docker, finch, podman or a path")
    p.add_argument("--no-build", action="store_true", help="push a local image of that tag")
    p.add_argument(
        "--no-push", action="store_true", help="the image is in ECR already: only the runtime"
    )
    p.add_argument(
        "--env", action="append", default=[], metavar="NAME=VALUE",
        help="a plain environment variable of the runtime (repeatable; no secrets)",
    )  # fmt: skip
    p.add_argument("--description", default=None, help="runtime description")
    p.add_argument("--idle-timeout", type=int, default=None, help="idle session timeout, seconds")
    p.add_argument("--max-lifetime", type=int, default=None, help="session lifetime, seconds")
    p.add_argument("--no-wait", action="store_true", help="do not wait for READY")
    p.add_argument("--wait-timeout", type=float, default=900.0, help="seconds (default 900)")
    p.add_argument("--poll-interval", type=float, default=5.0, help="seconds (default 5)")
    p.add_argument(
        "--dry-run", action="store_true", help="print every step and request; send nothing"
    )


def run(args: argparse.Namespace) -> int:
    """Run the subcommand; return the exit code (errors are raised as rollhub errors)."""
    if args.deploy_command == "init":
        return _init(args)
    return _deploy(args, sandbox=args.deploy_command == "sandbox")


def _init(args: argparse.Namespace) -> int:
    from rollhub.deploy.dockerfile import DOCKERIGNORE, inspect_project, render_agent_dockerfile

    project = inspect_project(args.project, app=args.app, python=args.python)
    dockerfile = project.root / "Dockerfile"
    if dockerfile.exists() and not args.force:
        raise UsageError(f"{str(dockerfile)!r} exists; pass --force to overwrite it")
    dockerfile.write_text(render_agent_dockerfile(project), encoding="utf-8")
    print(f"wrote {dockerfile} (python {project.python}, dependencies via {project.installer})")
    if project.uses_wheels:
        _bundle_wheels(project.root, project.dependency_files, dry_run=False)
    elif project.declares_rollhub:
        print(
            f"the image installs rollhub as {project.installer}'s lock says; rollhub is not on "
            f"the public package index, so lock it from a source the build can reach"
        )
    ignore = project.root / ".dockerignore"
    if ignore.exists():
        print(f"kept the existing {ignore}; make sure it excludes .env files and keys")
    else:
        ignore.write_text(DOCKERIGNORE, encoding="utf-8")
        print(f"wrote {ignore}")
    if not project.declares_rollhub:
        print(
            "warning: the project's dependencies do not name rollhub; add it, or the "
            "container cannot import rollhub.app"
        )
    print(
        f"next: rollhub deploy agentcore --project {args.project} --image-tag REPO:TAG "
        f"--role-arn ARN --dry-run"
    )
    return 0


def _deploy(args: argparse.Namespace, *, sandbox: bool) -> int:
    from rollhub.deploy.agentcore_control import RuntimeSpec, check_environment
    from rollhub.deploy.aws import AwsCalls
    from rollhub.deploy.deployer import DeployPlan, deploy
    from rollhub.deploy.names import (
        check_role_arn,
        parse_image_tag,
        role_account,
        runtime_name_for,
    )

    role = check_role_arn(args.role_arn)
    image = parse_image_tag(
        args.image_tag, account=role_account(role), region=_region(args.region, args.profile)
    )
    if args.region and args.region != image.region:
        raise ConfigError(
            f"--region {args.region} differs from the region of --image-tag ({image.region})"
        )
    for flag, value in (
        ("--wait-timeout", args.wait_timeout),
        ("--poll-interval", args.poll_interval),
    ):
        if value <= 0:
            raise ConfigError(f"{flag} {value:g}: must be positive")
    spec = RuntimeSpec(
        name=runtime_name_for(image.repository, args.runtime_name),
        container_uri=image.uri,
        role_arn=role,
        description=args.description,
        environment=check_environment(args.env),
        idle_timeout_s=args.idle_timeout,
        max_lifetime_s=args.max_lifetime,
    )
    tool = None if args.no_push else _container_tool(args)
    build = not (args.no_build or args.no_push)
    dockerfile = context = None
    temporary: str | None = None
    if build and sandbox:
        if args.context_dir is None and not args.dry_run:
            temporary = tempfile.mkdtemp(prefix="rollhub-sandbox-")
        context, dockerfile = _sandbox_context(args, temporary)
    elif build:
        context = Path(args.project)
        dockerfile = Path(args.dockerfile) if args.dockerfile else context / "Dockerfile"
        if not dockerfile.is_file():
            raise UsageError(
                f"{str(dockerfile)!r} does not exist; write one with "
                f"`rollhub deploy init --project {args.project}`"
            )
        if _installs_from_wheels(dockerfile):
            _bundle_wheels(context, _dependency_files(context), dry_run=args.dry_run)
    plan = DeployPlan(
        image=image,
        runtime=spec,
        tool=tool,
        dockerfile=dockerfile,
        context=context,
        push=not args.no_push,
        wait=not args.no_wait,
        wait_timeout_s=args.wait_timeout,
        poll_s=args.poll_interval,
    )
    calls = AwsCalls(region=image.region, profile=args.profile, dry_run=args.dry_run)
    try:
        result = deploy(plan, calls)
    finally:
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)
    print()
    verb = "would be created or updated" if args.dry_run else result.action
    print(f"runtime {spec.name} {verb}: {result.runtime_arn}")
    print(_toml_snippet(result.runtime_arn, sandbox=sandbox))
    return 0


def _installs_from_wheels(dockerfile: Path) -> bool:
    """Whether the Dockerfile installs from the bundled wheels (as `deploy init` writes it)."""
    from rollhub.deploy.dockerfile import FIND_LINKS

    return FIND_LINKS in dockerfile.read_text(encoding="utf-8", errors="replace")


def _dependency_files(root: Path) -> tuple[str, ...]:
    """The file the image's ``pip install`` reads: a requirements file, else pyproject.toml."""
    from rollhub.deploy.dockerfile import REQUIREMENTS_FILES

    found = next((name for name in REQUIREMENTS_FILES if (root / name).is_file()), None)
    return (found,) if found else ("pyproject.toml",)


def _bundle_wheels(root: Path, files: tuple[str, ...], *, dry_run: bool) -> None:
    """Decide where the image gets each rollhub distribution; write the bundled wheels."""
    from rollhub.deploy.wheels import WHEELS_DIR, plan_wheels, project_requirements, write_wheels

    choices = plan_wheels(project_requirements(root, files))
    target = root / WHEELS_DIR
    verb = "would bundle" if dry_run else "bundled"
    for choice in choices:
        where = f"{verb} in {target}" if choice.bundled else "not bundled"
        print(f"  {choice.name} ({choice.requirement}): {where}: {choice.reason}")
    if not dry_run:
        write_wheels(choices, root)


def _sandbox_context(args: argparse.Namespace, temporary: str | None) -> tuple[Path, Path]:
    """(context dir, Dockerfile) of the wrapped image; a dry run without --context-dir
    only checks the inputs and writes nothing."""
    from rollhub.deploy.sandbox_image import (
        find_shim_source,
        render_sandbox_dockerfile,
        write_sandbox_context,
    )

    shim = find_shim_source(args.shim_source)
    if args.context_dir is None and temporary is None:
        render_sandbox_dockerfile(args.base_image)  # checks the reference
        context = Path(tempfile.gettempdir()) / "rollhub-sandbox-XXXX"
        print(f"dry run: the build context (Dockerfile + shim.c) would be written to {context}")
        return context, context / "Dockerfile"
    context = Path(args.context_dir or temporary or "")
    dockerfile = write_sandbox_context(context, args.base_image, shim)
    print(f"build context for {args.base_image} + health shim: {context}")
    return context, dockerfile


def _container_tool(args: argparse.Namespace) -> ContainerTool:
    """The tool on PATH; a dry run without one shows the plan with a stand-in name."""
    from rollhub.deploy.container import ContainerTool, find_container_tool

    try:
        return find_container_tool(args.container_tool)
    except UsageError as exc:
        if not args.dry_run:
            raise
        name = args.container_tool or "docker"
        print(f"warning: {exc}; the plan below shows {name!r}")
        return ContainerTool(name=Path(name).name, executable=name)


def _region(explicit: str | None, profile: str | None) -> str | None:
    """--region, else AWS_REGION / AWS_DEFAULT_REGION, else the profile's configured region."""
    if explicit:
        return explicit
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        if os.environ.get(name):
            return os.environ[name]
    try:
        import botocore.session
    except ImportError:
        return None
    try:  # reads ~/.aws/config only; no request is sent
        return botocore.session.Session(profile=profile).get_config_variable("region")
    except Exception as exc:  # botocore's ProfileNotFound
        raise ConfigError(f"--profile {profile!r}: {exc}") from exc


def _toml_snippet(arn: str, *, sandbox: bool) -> str:
    if sandbox:
        return (
            "\nsandbox runtime for rollhub.toml:\n\n[plugins.sandbox]\n"
            f'provider = "agentcore"\noptions = {{ runtime_arn = "{arn}" }}'
        )
    return f'\nfor rollhub.toml:\n\n[runtime]\nname = "agentcore"\nruntime_arn = "{arn}"'
