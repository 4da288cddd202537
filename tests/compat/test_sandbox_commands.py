"""The sandbox's ``agentcore`` provider end to end on one machine: real boto3 → the local
data plane → the real rollhub shim (compiled from sandbox/shim) for the session, and the
command path (``InvokeAgentRuntimeCommand``'s event stream) run locally."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import ClientError
from rollhub.compat.agentcore_local import LocalAgentCore, runtime_arn
from rollhub.testing.servers import serve_app
from rollhub_sandbox.agentcore import AgentCoreOptions, AgentCoreProvider

ARN = runtime_arn("sandbox")
SHIM = Path(__file__).parents[2] / "sandbox" / "shim" / "shim.c"


@pytest.fixture(scope="session")
def shim_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler is needed to build the rollhub shim"
    out = tmp_path_factory.mktemp("shim") / "rollhub-shim"
    subprocess.run([cc, "-O2", "-o", str(out), str(SHIM), "-lpthread"], check=True)
    return out


@pytest.fixture
def shim_url(shim_binary: Path) -> Iterator[str]:
    proc = subprocess.Popen(
        [str(shim_binary), "--host", "127.0.0.1", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline().strip()  # "listening on HOST:PORT"
        assert line.startswith("listening on "), line
        yield "http://" + line.removeprefix("listening on ")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def sandbox_plane(aws_env, shim_url: str, tmp_path: Path) -> Iterator[tuple[str, LocalAgentCore]]:
    plane = LocalAgentCore({ARN: shim_url}, commands_dir=tmp_path)
    with serve_app(plane) as url:
        yield url, plane


async def test_provider_runs_commands_and_files(sandbox_plane, tmp_path: Path) -> None:
    url, plane = sandbox_plane
    workdir = tmp_path / "workspace"
    options = AgentCoreOptions(runtime_arn=ARN, endpoint_url=url, workdir=str(workdir))
    provider = AgentCoreProvider(options)
    sandbox = await provider.create(None, ttl=60)
    try:
        assert workdir.is_dir()  # the provider's mkdir ran through the command path
        result = await sandbox.exec(
            "echo out; echo err >&2; printf %s \"$GREETING\"; exit 3",
            cwd=str(workdir), env={"GREETING": "héllo"}, timeout=30, stdin=None,
            max_output=4096,
        )  # fmt: skip
        assert (result.exit_code, result.stdout, result.stderr) == (3, "out\nhéllo", "err\n")
        assert not result.timed_out
        await sandbox.write_file(str(workdir / "a" / "b.txt"), b"payload \x00\xff")
        assert await sandbox.read_file(str(workdir / "a" / "b.txt")) == b"payload \x00\xff"
        slow = await sandbox.exec(
            "sleep 5", cwd=str(workdir), env={}, timeout=1, stdin=None, max_output=100
        )
        assert slow.timed_out
        again = await provider.attach(sandbox.id)
        assert again.id == sandbox.id
    finally:
        await sandbox.destroy()
        await provider.aclose()
    ops = [call[0] for call in plane.calls]
    assert "InvokeAgentRuntimeCommand" in ops and ops[-1] == "StopRuntimeSession"


def test_commands_are_refused_unless_enabled(aws_env, shim_url: str) -> None:
    plane = LocalAgentCore({ARN: shim_url})
    with serve_app(plane) as url:
        client = boto3.client("bedrock-agentcore", endpoint_url=url, region_name="us-west-2")
        sid = "c" * 40
        client.invoke_agent_runtime(
            agentRuntimeArn=ARN, runtimeSessionId=sid, payload=b'{"action": "status"}'
        )
        with pytest.raises(ClientError) as info:
            client.invoke_agent_runtime_command(
                agentRuntimeArn=ARN, runtimeSessionId=sid, body={"command": "true"}
            )
    assert info.value.response["Error"]["Code"] == "AccessDeniedException"
