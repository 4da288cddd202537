"""The docker provider: against a real engine where one runs; skipped (with the reason) elsewhere."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from rollhub_sandbox import (
    AsyncSandboxClient,
    SandboxFileError,
    SandboxNotFound,
    SandboxProviderError,
)
from rollhub_sandbox.docker import docker_status

DOCKER, REASON = docker_status()
IMAGE = "busybox:latest"


def test_status_reports_a_reason() -> None:
    usable, reason = docker_status("definitely-not-docker-xyz")
    assert not usable and "not on PATH" in reason
    assert isinstance(REASON, str) and REASON


async def test_missing_cli_is_a_typed_error(tmp_path: Path) -> None:
    client = AsyncSandboxClient("docker", docker=str(tmp_path / "no-docker"))
    with pytest.raises(SandboxProviderError, match="no-docker"):
        await client.create(IMAGE, ttl=60)
    with pytest.raises(SandboxProviderError):
        await client.reap()


needs_docker = pytest.mark.skipif(not DOCKER, reason=f"needs a Docker engine: {REASON}")


@needs_docker
async def test_docker_sandbox_round_trip(tmp_path: Path) -> None:
    client = AsyncSandboxClient("docker", kill_grace=0.5)
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    (src / "d" / "f.bin").write_bytes(b"\x00\x01")
    async with client.start(IMAGE, ttl=300) as sb:
        r = await sb.exec("pwd; echo $V; exit 3", env={"V": "it's"})
        assert (r.exit_code, r.stdout) == (3, "/workspace\nit's\n")
        assert (await sb.exec("touch x", cwd="missing")).exit_code == 2
        await sb.write_file("a/b.bin", bytes(range(256)))
        assert await sb.read_file("a/b.bin") == bytes(range(256))
        await sb.upload(src, "up")
        assert await sb.read_file("up/d/f.bin") == b"\x00\x01"
        with pytest.raises(SandboxFileError):
            await sb.read_file("missing")
        started = time.monotonic()
        r = await sb.exec("trap '' TERM; sleep 60", timeout=1)
        assert r.timed_out and time.monotonic() - started < 20
        assert "sleep 60" not in (await sb.exec("ps")).stdout
        assert (await client.attach(sb.id)).id == sb.id
    with pytest.raises(SandboxNotFound):
        await client.attach(sb.id)
