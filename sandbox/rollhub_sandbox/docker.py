"""The ``docker`` provider: one container per sandbox, through the Docker CLI.

``docker run -d`` starts a container from the image (``source``) that idles under an init
process; commands run with ``docker exec`` as ``/bin/sh -c '<script>'`` (cwd and env folded
into the script, like AgentCore); files move with ``docker exec -i … cat`` and ``docker cp``.
Each command's processes carry ``ROLLHUB_SANDBOX_EXEC=<tag>`` in their environment, and at a
timeout every process in the container with that tag is killed (``docker exec`` itself does
not kill what it started). Containers carry labels with their expiry time, so ``reap()``
removes expired ones from any process.
"""

from __future__ import annotations

import asyncio
import io
import logging
import os
import shlex
import shutil
import tarfile
import time
import uuid
from pathlib import Path

from pydantic import Field

from rollhub_sandbox.errors import (
    SandboxFileError,
    SandboxNotFound,
    SandboxProviderError,
    SandboxStartError,
)
from rollhub_sandbox.process import run_process
from rollhub_sandbox.provider import ProviderOptions, ProviderSandbox, SandboxProvider
from rollhub_sandbox.result import ExecResult
from rollhub_sandbox.shell import shell_script

log = logging.getLogger(__name__)

__all__ = ["DockerOptions", "DockerProvider", "DockerSandbox", "docker_status"]

LABEL = "io.rollhub.sandbox"
#: Kills every process whose environment holds the tag given as $1 (a shell version of
#: rollhub_sandbox.process.find_tagged, for images without Python).
_KILL_TAGGED = (
    "for p in /proc/[0-9]*; do "
    'if tr "\\000" "\\n" < "$p/environ" 2>/dev/null | grep -qxF -- "$1"; then '
    'kill -KILL "${p#/proc/}" 2>/dev/null; fi; done; true'
)


class DockerOptions(ProviderOptions):
    """Options of the ``docker`` provider."""

    docker: str = Field("docker", description="the Docker CLI executable")
    workdir: str = Field("/workspace", description="directory commands start in (created at start)")
    network: str | None = Field(None, description="docker run --network (e.g. 'none')")
    run_args: list[str] = Field(default_factory=list, description="extra docker run arguments")
    default_image: str = Field("python:3.11-slim", description="image when start() gets none")


async def _run(
    argv: list[str], *, stdin: bytes | None = None, timeout: float | None = None
) -> tuple[int, bytes, bytes]:
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except OSError as exc:
        raise SandboxProviderError(f"cannot run {argv[0]!r}: {exc}") from exc
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin), timeout)
    except TimeoutError:
        proc.kill()
        out, err = await proc.communicate()
        return -9, out, err
    return proc.returncode or 0, out, err


def docker_status(docker: str = "docker") -> tuple[bool, str]:
    """``(usable, reason)``: whether a Docker engine answers ``docker info``."""
    import subprocess

    exe = shutil.which(docker)
    if exe is None:
        return False, f"{docker!r} is not on PATH"
    try:
        proc = subprocess.run(
            [exe, "info", "--format", "{{.ServerVersion}}"],
            capture_output=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"docker info failed: {exc}"
    if proc.returncode != 0:
        return False, "no Docker engine: " + proc.stderr.decode(errors="replace").strip()[:300]
    return True, "docker engine " + proc.stdout.decode().strip()


class DockerSandbox(ProviderSandbox):
    """One container."""

    def __init__(self, provider: DockerProvider, sandbox_id: str) -> None:
        self.provider = provider
        self.id = sandbox_id
        self.workdir = provider.options.workdir

    def _docker(self, *args: str) -> list[str]:
        return [self.provider.options.docker, *args]

    async def exec(
        self,
        command: str,
        *,
        cwd: str,
        env: dict[str, str],
        timeout: float | None,
        stdin: bytes | None,
        max_output: int,
    ) -> ExecResult:
        tag = f"ROLLHUB_SANDBOX_EXEC={uuid.uuid4().hex}"
        argv = self._docker(
            "exec",
            *(["-i"] if stdin is not None else []),
            "-e",
            tag,
            self.id,
            "/bin/sh",
            "-c",
            shell_script(command, cwd=cwd, env=env),
        )
        try:
            # The CLI runs as a local process group: capped output, drained pipes, timeout.
            result = await run_process(
                argv,
                env=dict(os.environ),
                tag=tag,
                stdin=stdin,
                timeout=timeout,
                max_output=max_output,
                kill_grace=1.0,
            )
        except OSError as exc:
            raise SandboxProviderError(
                f"cannot run {argv[0]!r}: {exc}", sandbox_id=self.id
            ) from exc
        if result.timed_out:
            # Killing `docker exec` leaves its processes running in the container.
            await _run(
                self._docker("exec", self.id, "/bin/sh", "-c", _KILL_TAGGED, "sh", tag), timeout=30
            )
        elif result.exit_code in (125, 126, 127, 1) and "No such container" in result.stderr:
            raise SandboxNotFound(f"container {self.id!r} is gone", sandbox_id=self.id)
        return result

    async def _checked(
        self, argv: list[str], *, what: str, path: str, stdin: bytes | None = None
    ) -> bytes:
        rc, out, err = await _run(argv, stdin=stdin)
        if rc != 0:
            raise SandboxFileError(
                f"{what} {path!r} in container {self.id!r} failed: "
                f"{err.decode(errors='replace').strip()[:500]}",
                path=path,
                sandbox_id=self.id,
            )
        return out

    async def write_file(self, path: str, data: bytes) -> None:
        script = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"'
        await self._checked(
            self._docker("exec", "-i", self.id, "/bin/sh", "-c", script, "sh", path),
            what="write",
            path=path,
            stdin=data,
        )

    async def read_file(self, path: str) -> bytes:
        raw = await self._checked(
            self._docker("cp", f"{self.id}:{path}", "-"), what="read", path=path
        )
        with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
            member = tar.next()
            fh = tar.extractfile(member) if member is not None else None
            if fh is None:
                raise SandboxFileError(f"read {path!r}: not a regular file", path=path)
            return fh.read()

    async def upload(self, local_dir: Path, remote_dir: str) -> None:
        await self._checked(
            self._docker("exec", self.id, "mkdir", "-p", "--", remote_dir),
            what="upload to",
            path=remote_dir,
        )
        await self._checked(
            self._docker("cp", f"{local_dir}/.", f"{self.id}:{remote_dir}"),
            what="upload to",
            path=remote_dir,
        )

    async def destroy(self) -> None:
        await _run(self._docker("rm", "-f", self.id), timeout=60)


class DockerProvider(SandboxProvider):
    """Sandboxes as Docker containers (needs a Docker engine)."""

    name = "docker"
    Options = DockerOptions
    options: DockerOptions

    async def create(self, source: str | None, *, ttl: float) -> DockerSandbox:
        opts = self.options
        sandbox_id = f"sbx-{uuid.uuid4().hex}"
        workdir = shlex.quote(opts.workdir)
        argv = [
            opts.docker,
            "run",
            "-d",
            "--init",
            "--name",
            sandbox_id,
            "--label",
            f"{LABEL}=1",
            "--label",
            f"{LABEL}.expires_at={time.time() + ttl:.3f}",
            *(["--network", opts.network] if opts.network else []),
            *opts.run_args,
            "--entrypoint",
            "/bin/sh",
            source or opts.default_image,
            "-c",
            f"mkdir -p -- {workdir} && exec tail -f /dev/null",
        ]
        rc, _out, err = await _run(argv, timeout=600)
        if rc != 0:
            raise SandboxStartError(
                f"docker run of {source or opts.default_image!r} failed: "
                f"{err.decode(errors='replace').strip()[:500]}",
                source=source,
            )
        return DockerSandbox(self, sandbox_id)

    async def attach(self, sandbox_id: str) -> DockerSandbox:
        rc, out, _err = await _run(
            [
                self.options.docker,
                "inspect",
                "-f",
                f'{{{{.State.Running}}}} {{{{index .Config.Labels "{LABEL}.expires_at"}}}}',
                sandbox_id,
            ],
            timeout=60,
        )
        fields = out.decode().split()
        if rc != 0 or len(fields) != 2 or fields[0] != "true":
            raise SandboxNotFound(
                f"no running sandbox container {sandbox_id!r}", sandbox_id=sandbox_id
            )
        if float(fields[1]) <= time.time():
            await _run([self.options.docker, "rm", "-f", sandbox_id], timeout=60)
            raise SandboxNotFound(f"sandbox {sandbox_id!r} expired", sandbox_id=sandbox_id)
        return DockerSandbox(self, sandbox_id)

    async def reap(self) -> list[str]:
        rc, out, _err = await _run(
            [
                self.options.docker,
                "ps",
                "-a",
                "--filter",
                f"label={LABEL}=1",
                "--format",
                f'{{{{.Names}}}} {{{{.Label "{LABEL}.expires_at"}}}}',
            ],
            timeout=60,
        )
        if rc != 0:
            return []
        now, expired = time.time(), []
        for line in out.decode().splitlines():
            name, _, when = line.partition(" ")
            try:
                if float(when) <= now:
                    expired.append(name)
            except ValueError:
                continue
        if expired:
            await _run([self.options.docker, "rm", "-f", *expired], timeout=120)
        return expired
