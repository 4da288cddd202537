"""The S3 server (SeaweedFS) killed mid-run and restarted on the same data and ports.

While it is down, rollouts end as ``store_error`` within seconds with the cause and free
their slots; once it is back, rollouts are ok again at full speed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from rollhub.client import AsyncRolloutClient
from rollhub.stores.s3 import S3ResultStore
from rollhub.testing.seaweedfs import seaweedfs_server

from tests.reliability.local_pools import LONG, make_runtime, pid_alive

aio = pytest.mark.asyncio(loop_scope="function")
CREDS = {
    "AWS_ACCESS_KEY_ID": "rollhub-test",
    "AWS_SECRET_ACCESS_KEY": "rollhub-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def _weed_process(endpoint: str) -> tuple[int, list[str], str]:
    """PID, command line and working directory of the server behind ``endpoint``."""
    flag = f"-s3.port={endpoint.rsplit(':', 1)[1]}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except (FileNotFoundError, PermissionError, ProcessLookupError):
            continue
        if flag in cmd:
            return int(entry), [c.decode() for c in cmd if c], cwd
    raise AssertionError(f"no weed process serves {endpoint}")


def _wait_up(endpoint: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(endpoint, timeout=1)
            return
        except urllib.error.HTTPError:
            return  # any HTTP answer means it is serving
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"{endpoint} did not come back")


@aio
async def test_s3_killed_and_restarted_mid_run(tmp_path, monkeypatch) -> None:
    for key, value in CREDS.items():
        monkeypatch.setenv(key, value)
    n = 120 if LONG else 40
    with seaweedfs_server(tmp_path) as endpoint:
        store = S3ResultStore.from_url("s3://outage/run", endpoint_url=endpoint, create_bucket=True)
        store.put("probe/x/y.json", {"ok": True})  # creates the bucket
        rt = make_runtime(env={**CREDS, "ROLLHUB_S3_ENDPOINT_URL": endpoint})
        restarted: subprocess.Popen[bytes] | None = None
        try:
            async with rt, AsyncRolloutClient(rt, store, exp_id="s3o") as client:
                before = [await f for f in [client.invoke({"x": i}, timeout=30) for i in range(n)]]
                assert {o.status for o in before} == {"ok"}

                pid, cmd, cwd = _weed_process(endpoint)
                os.kill(pid, signal.SIGKILL)
                down_at = time.monotonic()
                during = [await f for f in [client.invoke({"x": i}, timeout=60) for i in range(8)]]
                reported = time.monotonic() - down_at
                assert {o.status for o in during} == {"store_error"}
                assert all("could not store the result" in o.error.message for o in during)
                assert reported < 30, f"store errors took {reported:.1f}s"
                assert sum(rt.load().values()) == 0

                # the same environment as the first start: no AWS_* keys, so any key is
                # accepted (with them in its environment the server would enforce them)
                env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
                with open(Path(cwd) / "weed-restart.out", "wb") as out:
                    restarted = subprocess.Popen(
                        cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT
                    )
                _wait_up(endpoint)
                started = time.monotonic()
                after = [await f for f in [client.invoke({"x": i}, timeout=60) for i in range(n)]]
                recovery = time.monotonic() - down_at
                assert [o.status for o in after].count("ok") == n
                assert time.monotonic() - started < 30
        finally:
            if restarted is not None:
                restarted.kill()
                restarted.wait()
                assert not pid_alive(restarted.pid)
    figures = {
        "rollouts": 2 * n + 8,
        "store_error": len(during),
        "lost": 0,
        "reported_within_s": round(reported, 1),
        "recovery_s": round(recovery, 1),
    }
    print("s3-outage figures:", json.dumps(figures))
