"""The image ``rollhub deploy init`` writes, built and run: a rollout through it end to end.

For this machine's architecture (and arm64, AgentCore's, where QEMU emulation is
registered): ``rollhub deploy init`` writes the Dockerfile and bundles the rollhub wheel,
podman builds the image without a network (the rollhub wheel and the third-party wheels
are in the build context; the base image has no package index), the container serves the
app, and a rollout goes through the local AgentCore data plane (the real boto3
``bedrock-agentcore`` client under :class:`~rollhub.runtimes.agentcore.AgentCoreRuntime`)
to its result document in SeaweedFS. Then: ``/ping`` Healthy, the serving process not root,
and SIGTERM ending the container within the grace period.

Images are tagged by content hash and reused (see :mod:`tests.deploy_image.engine`).
Skipped, with the reason, where podman is missing or cannot run the architecture.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import subprocess
import sys
import time
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import boto3
import httpx
import pytest
from rollhub import cli
from rollhub.client import AsyncRolloutClient
from rollhub.compat.agentcore_local import LocalAgentCore, runtime_arn
from rollhub.runtimes.agentcore import AgentCoreRuntime
from rollhub.stores import open_store
from rollhub.testing.seaweedfs import seaweedfs_server
from rollhub.testing.servers import serve_app

from tests.deploy_image.engine import (
    ARCHES,
    PYTHON,
    EngineMissing,
    Podman,
    base_image,
    can_run,
    context_digest,
    digest,
    find_podman,
    host_arch,
)

log = logging.getLogger(__name__)

AGENT_DIR = Path(__file__).with_name("agent")
BUCKET = "rollouts"
REGION = "us-west-2"
APP_UID = 10001
#: seconds ``podman stop`` waits after SIGTERM before it kills (AgentCore's is longer).
GRACE_S = 10
#: the host's loopback as slirp4netns shows it to the container.
HOST_FROM_CONTAINER = "10.0.2.2"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "rollhub-tests"


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Podman:
    try:
        return find_podman(tmp_path_factory.mktemp("podman"))
    except EngineMissing as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with seaweedfs_server(tmp_path_factory.mktemp("s3")) as endpoint:
        _s3(endpoint).create_bucket(Bucket=BUCKET)
        yield endpoint


def _s3(endpoint: str):
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )


def _dependency_wheels(context: Path, arch: str) -> None:
    """The third-party wheels the agent needs, for ``arch``, into ``context/wheels``.

    Downloaded once per (rollhub's requirements, the agent's, the architecture) into a
    cache directory, then copied: the image build itself has no network.
    """
    wheels = context / "wheels"
    (rollhub_wheel,) = wheels.glob("rollhub-*.whl")
    with zipfile.ZipFile(rollhub_wheel) as whl:
        meta = next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA"))
        requires = [
            line for line in whl.read(meta).decode().splitlines() if line.startswith("Requires")
        ]
    requirements = (context / "requirements.txt").read_bytes()
    key = digest("\n".join(requires).encode(), requirements, arch.encode())
    cache = CACHE / f"wheels-{arch}-{key}"
    if not (cache / ".complete").exists():
        cache.mkdir(parents=True, exist_ok=True)
        cpu = ARCHES[arch][1]
        # every manylinux tag this base image's glibc (2.36) runs
        platforms = [f"manylinux_2_{minor}_{cpu}" for minor in range(36, 16, -1)]
        platforms += [f"manylinux2014_{cpu}"]
        argv = [sys.executable, "-m", "pip", "download", "-q", "--dest", str(cache),
                "--find-links", str(wheels), "-c", str(wheels / "constraints.txt"),
                "--only-binary=:all:", "--python-version", PYTHON, "--implementation", "cp",
                "--abi", f"cp{PYTHON.replace('.', '')}",
                *(arg for p in platforms for arg in ("--platform", p)),
                "-r", str(context / "requirements.txt")]  # fmt: skip
        subprocess.run(argv, check=True, capture_output=True, timeout=600)
        (cache / ".complete").write_text("")
    for wheel in cache.glob("*.whl"):
        if not wheel.name.startswith("rollhub-"):
            shutil.copy(wheel, wheels / wheel.name)


def build_agent_image(
    engine: Podman,
    arch: str,
    workdir: Path,
    *,
    agent_dir: Path = AGENT_DIR,
    app: str = "agent.py:app",
    name: str = "rollhub-test-agent",
) -> tuple[str, float]:
    """(tag, build seconds): the image of the agent project ``agent_dir`` for ``arch``,
    built only when not there yet."""
    base = base_image(engine, arch, workdir)
    context = workdir / f"{name}-{arch}"
    shutil.copytree(agent_dir, context)
    argv = ["deploy", "init", "--project", str(context), "--app", app]
    assert cli.main([*argv, "--python", PYTHON]) == 0
    _dependency_wheels(context, arch)
    tag = f"localhost/{name}:{arch}-{context_digest(context)}"
    if engine.image_exists(tag):
        return tag, 0.0
    platform = ARCHES[arch][0]
    started = time.monotonic()
    engine(
        "build", "--platform", platform, "--network", "none",
        "--build-arg", f"BASE_IMAGE={base}", "--build-arg", f"PLATFORM={platform}",
        "-t", tag, str(context), timeout=1800,
    )  # fmt: skip
    return tag, time.monotonic() - started


def _wait_healthy(engine: Podman, name: str, url: str, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            answer = httpx.get(f"{url}/ping", timeout=2)
            if answer.status_code == 200:
                return answer.json()
        except httpx.HTTPError:
            pass
        state = engine("inspect", name, "--format", "{{.State.Status}}").stdout.strip()
        if state != "running" or time.monotonic() > deadline:
            logs = engine("logs", name, check=False)
            raise AssertionError(f"container {state}, no /ping answer:\n{logs.stderr[-3000:]}")
        time.sleep(0.5)


async def _rollout(app_url: str, s3_endpoint: str, exp_id: str) -> tuple:
    """One rollout through the local data plane; (outcome, the plane's calls)."""
    arn = runtime_arn("image_agent")
    plane = LocalAgentCore({arn: app_url}, timeout_s=60)
    with serve_app(plane) as plane_url:
        runtime = AgentCoreRuntime(runtime_arn=arn, endpoint_url=plane_url)
        store = open_store(f"s3://{BUCKET}/image-test", endpoint_url=s3_endpoint)
        async with AsyncRolloutClient(
            runtime, store, exp_id=exp_id, callbacks=False, close_runtime=True
        ) as client:
            future = client.invoke({"a": 2, "b": 3, "answer": 5}, timeout=120)
            outcome = await future
    return outcome, future.session_id, list(plane.calls)


ARCH_CASES = [host_arch(), *(a for a in ARCHES if a != host_arch())]


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCH_CASES)
def test_the_deployed_image_serves_a_rollout(
    arch: str,
    engine: Podman,
    s3_endpoint: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    why_not = can_run(arch)
    if why_not:
        pytest.skip(why_not)
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    started = time.monotonic()
    try:
        tag, build_s = build_agent_image(engine, arch, tmp_path)
    except EngineMissing as exc:  # no base image and nothing to make one with
        pytest.skip(str(exc))
    image = json.loads(engine("image", "inspect", tag).stdout)[0]
    assert image["Architecture"] == arch
    assert image["Config"]["User"] == str(APP_UID)

    s3_port = s3_endpoint.rsplit(":", 1)[1].strip("/")
    name = f"rollhub-test-{uuid.uuid4().hex[:10]}"
    # Under QEMU user emulation the app cannot be PID 1: uvicorn re-raises the SIGTERM it
    # handled, a native PID 1 ignores that (exit 0), but qemu turns it into a kill of
    # itself that PID 1 never receives, and hangs. There podman's init runs as PID 1 and
    # forwards the signal; the app then ends by that re-raised SIGTERM (143).
    emulated = arch != host_arch()
    engine(
        "run", "-d", "--name", name, *(["--init"] if emulated else []),
        "--network", "slirp4netns:allow_host_loopback=true", "-p", "127.0.0.1::8080",
        "-e", "AWS_ACCESS_KEY_ID=test", "-e", "AWS_SECRET_ACCESS_KEY=test",
        "-e", f"AWS_DEFAULT_REGION={REGION}",
        "-e", f"AWS_ENDPOINT_URL_S3=http://{HOST_FROM_CONTAINER}:{s3_port}",
        tag,
    )  # fmt: skip
    try:
        host_port = engine("port", name, "8080/tcp").stdout.strip().rsplit(":", 1)[1]
        app_url = f"http://127.0.0.1:{host_port}"
        up = time.monotonic()
        assert _wait_healthy(engine, name, app_url, timeout_s=180)["status"] == "Healthy"
        healthy_s = time.monotonic() - up

        # every process of the container, uvicorn serving the app among them, runs as the
        # image's unprivileged user; natively uvicorn is PID 1
        rows = engine("top", name, "pid", "huser", "args").stdout.splitlines()[1:]
        procs = {int(r.split()[0]): (r.split()[1], r.split(None, 2)[2]) for r in rows}
        assert {user for user, _ in procs.values()} == {str(APP_UID)}, procs
        serving = [pid for pid, (_, args) in procs.items() if "podman-init" not in args]
        assert len(serving) == 1 and "-m uvicorn" in procs[serving[0]][1], procs
        assert emulated or serving == [1], procs

        exp_id = f"image-{arch}"
        outcome, session_id, calls = asyncio.run(_rollout(app_url, s3_endpoint, exp_id))
        assert outcome.status == "ok", outcome.error
        assert outcome.result["rewards"] == 1.0 and outcome.result["sum"] == 5
        assert outcome.result["uid"] == APP_UID
        assert outcome.result["machine"] == ARCHES[arch][1]
        assert calls[0][0] == "InvokeAgentRuntime"
        # the container wrote the result document into the store itself
        listed = _s3(s3_endpoint).list_objects_v2(Bucket=BUCKET, Prefix=f"image-test/{exp_id}/")
        (key,) = [item["Key"] for item in listed.get("Contents", [])]
        assert key.endswith(f"/{session_id}.json")
        body = _s3(s3_endpoint).get_object(Bucket=BUCKET, Key=key)["Body"].read()
        assert json.loads(body)["sum"] == 5

        stop = time.monotonic()
        engine("stop", "--time", str(GRACE_S), name, timeout=GRACE_S + 60)
        stop_s = time.monotonic() - stop
        state = json.loads(engine("inspect", name).stdout)[0]["State"]
        shown = engine("logs", name)
        logs = shown.stdout + shown.stderr
    finally:
        engine("rm", "-f", name, check=False)
    # SIGTERM, not the kill after the grace period (137), ended it: uvicorn shut down cleanly
    assert state["ExitCode"] == (143 if emulated else 0) and stop_s < GRACE_S, (state, stop_s)
    assert "Application shutdown complete" in logs
    size_mb = int(image["Size"]) / 1e6
    log.info(
        "image %s: %.0f MB; build %.1f s (0: reused), healthy after %.1f s, stopped in %.1f s, "
        "test %.1f s",
        tag, size_mb, build_s, healthy_s, stop_s, time.monotonic() - started,
    )  # fmt: skip
