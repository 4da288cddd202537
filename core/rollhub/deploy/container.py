"""The local container tool (docker, finch or podman): build, log in to ECR, push.

The three CLIs share the commands used here (``build --platform -t -f``, ``login
--username --password-stdin``, ``push``). The registry password goes to the tool's
standard input, never into its argv (visible to every process) or to the console.
"""

from __future__ import annotations

import logging
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from rollhub.deploy.errors import ECR_PUSH_ACTIONS, DeployError
from rollhub.errors import UsageError

__all__ = ["PLATFORM", "TOOLS", "ContainerTool", "find_container_tool"]

log = logging.getLogger(__name__)

#: the container tools looked for on PATH, in this order.
TOOLS = ("docker", "finch", "podman")
#: AgentCore Runtime's architecture.
PLATFORM = "linux/arm64"


def find_container_tool(preferred: str | None = None, *, path: str | None = None) -> ContainerTool:
    """The container tool to use: ``preferred`` (a name or a path) or the first of :data:`TOOLS`.

    :param path: the search path (default ``$PATH``).
    :raises UsageError: none found; the message names the tools and ``--no-build``/``--no-push``.
    """
    names = (preferred,) if preferred else TOOLS
    for name in names:
        found = shutil.which(name, path=path)
        if found:
            return ContainerTool(name=Path(name).name, executable=found)
    if preferred:
        raise UsageError(f"--container-tool {preferred!r} was not found on PATH")
    raise UsageError(
        f"no container tool found on PATH (looked for {', '.join(TOOLS)}); install one, pass "
        f"--container-tool PATH, or skip the build with --no-build (a local image of that "
        f"tag) or --no-push (an image already in ECR)"
    )


@dataclass(frozen=True)
class ContainerTool:
    """One container CLI. ``name`` is what it is (docker/finch/podman), ``executable`` its path."""

    name: str
    executable: str

    def build_argv(self, *, image: str, dockerfile: Path, context: Path) -> list[str]:
        """``build`` for :data:`PLATFORM`, tagged with the image's ECR URI."""
        return [
            self.executable, "build", "--platform", PLATFORM,
            "-t", image, "-f", str(dockerfile), str(context),
        ]  # fmt: skip

    def login_argv(self, registry: str, username: str = "AWS") -> list[str]:
        """``login`` to ``registry``; the password is read from standard input."""
        return [self.executable, "login", "--username", username, "--password-stdin", registry]

    def push_argv(self, image: str) -> list[str]:
        """``push`` of the image to its registry."""
        return [self.executable, "push", image]

    def run(self, argv: list[str], *, step: str, stdin: str | None = None) -> None:
        """Run ``argv``; its output streams to the console. A non-zero exit is a DeployError.

        Output of ``login`` is captured instead (it can echo configuration paths), and a
        failed ``push`` that the registry denied names the ECR actions the caller needs.
        """
        log.info("running %s", shlex.join(argv))
        capture = step in {"login", "push"}
        try:
            proc = subprocess.run(
                argv,
                input=stdin,
                text=True,
                capture_output=capture,
                check=False,
            )
        except OSError as exc:
            raise DeployError(
                f"{self.name} {step}: cannot run {argv[0]!r}: {exc}", step=step
            ) from exc
        if capture and proc.stdout:
            print(proc.stdout, end="")
        if proc.returncode == 0:
            return
        detail = (proc.stderr or "").strip() if capture else ""
        message = f"{self.name} {step} failed with exit code {proc.returncode}"
        if detail:
            message += f": {detail.splitlines()[-1]}"
        permissions: tuple[str, ...] = ()
        lowered = detail.lower()
        if step == "push" and ("denied" in lowered or "not authorized" in lowered):
            permissions = ECR_PUSH_ACTIONS
            message += (
                f" (the AWS identity running rollhub deploy needs {', '.join(ECR_PUSH_ACTIONS)} "
                f"on the repository)"
            )
        elif step == "build" and proc.returncode != 0:
            message += (
                f" (building {PLATFORM} on another architecture needs emulation; see the "
                f"note at the top of the Dockerfile)"
            )
        raise DeployError(message, step=step, permissions=permissions, exit_code=proc.returncode)
