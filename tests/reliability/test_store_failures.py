"""A result the app cannot store ends as ``store_error`` within seconds, slot freed.

Unwritable ``file://`` root, a full disk (a small tmpfs when this process may mount one,
else a store whose writes fail with ENOSPC), with callbacks and without.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from rollhub.client import AsyncRolloutClient
from rollhub.stores.file import FileResultStore

from tests.reliability.agents import FullDiskStore
from tests.reliability.local_pools import make_runtime

aio = pytest.mark.asyncio(loop_scope="function")


async def _run(rt, store, n: int, *, callbacks: bool = True, timeout: float = 60.0):
    async with rt, AsyncRolloutClient(rt, store, exp_id="st", callbacks=callbacks) as client:
        started = time.monotonic()
        futures = [client.invoke({"x": i}, timeout=timeout) for i in range(n)]
        outs = [await f for f in futures]
        elapsed = time.monotonic() - started
        # a resolved rollout's slot is released by a task the client starts after
        # resolving it: wait for those, not for a poll of the workers
        await client.settle()
        return outs, elapsed, sum(rt.load().values())


@aio
@pytest.mark.parametrize("callbacks", [True, False], ids=["callbacks", "polling"])
async def test_unwritable_file_store_is_store_error_within_seconds(tmp_path, callbacks) -> None:
    root = tmp_path / "not-a-dir"
    root.write_text("a file where the store's directory should be")
    store = FileResultStore(root, fsync=False)
    outs, elapsed, load = await _run(make_runtime(), store, 6, callbacks=callbacks)
    assert [o.status for o in outs] == ["store_error"] * 6
    assert all("could not store the result" in o.error.message for o in outs)
    assert all(str(root) in o.error.message for o in outs)
    assert elapsed < 15, f"store failures took {elapsed:.1f}s to be reported"
    assert load == 0  # every slot freed


@contextlib.contextmanager
def _small_tmpfs(path: Path):
    path.mkdir()
    try:
        mounted = (
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(path)],
                capture_output=True,
                check=False,
            ).returncode
            == 0
        )
    except OSError:  # no mount command here
        mounted = False
    try:
        yield mounted
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(path)], check=False)


@aio
async def test_full_disk_is_store_error_naming_enospc(tmp_path) -> None:
    with _small_tmpfs(tmp_path / "disk") as mounted:
        if mounted:
            filler = tmp_path / "disk" / "filler"
            with contextlib.suppress(OSError), filler.open("wb") as fh:
                fh.write(b"\0" * (1 << 20))
            store = FileResultStore(tmp_path / "disk" / "results", fsync=False)
            rt = make_runtime()
        else:
            store = FullDiskStore(tmp_path / "disk" / "results")
            rt = make_runtime("full_disk")
        outs, elapsed, load = await _run(rt, store, 4)
    assert [o.status for o in outs] == ["store_error"] * 4
    assert all("No space left on device" in o.error.message for o in outs), outs[0].error
    assert elapsed < 15 and load == 0


@aio
async def test_store_error_does_not_slow_later_rollouts(tmp_path) -> None:
    """After failures, rollouts to a working store run at full speed (no held slots)."""
    root = tmp_path / "file"
    root.write_text("x")
    bad = FileResultStore(root, fsync=False)
    good = FileResultStore(tmp_path / "good", fsync=False)
    rt = make_runtime(max_concurrency_per_worker=4)
    async with rt:
        async with AsyncRolloutClient(rt, bad, exp_id="bad") as client:
            outs = [await f for f in [client.invoke({"x": i}) for i in range(8)]]
        assert {o.status for o in outs} == {"store_error"}
        async with AsyncRolloutClient(rt, good, exp_id=f"g{uuid.uuid4().hex[:6]}") as client:
            started = time.monotonic()
            outs = [await f for f in [client.invoke({"x": i}, timeout=30) for i in range(40)]]
            elapsed = time.monotonic() - started
    assert {o.status for o in outs} == {"ok"}
    assert elapsed < 20


def test_rollhub_run_with_unstored_results_exits_1_naming_the_cause(tmp_path) -> None:
    """The full disk through the CLI: the run ends, the summary names the cause, exit 1."""
    import json
    import sys

    root = Path(__file__).resolve().parents[2]
    (tmp_path / "full_store.py").write_text(
        "from rollhub import hookimpl\n"
        "from tests.reliability.agents import FullDiskStore\n\n"
        "@hookimpl\n"
        "def rollhub_register_components(registry):\n"
        "    registry.add_store(FullDiskStore)\n"
    )
    (tmp_path / "data.jsonl").write_text("".join(json.dumps({"id": f"p{i}"}) + "\n" for i in range(3)))
    (tmp_path / "rollhub.toml").write_text(f"""
[experiment]
name = "full"
dataset = "data.jsonl"
n_samples = 2
timeout_s = 60
progress = false

[runtime]
name = "local"
app = "{root / 'tests' / 'reliability' / 'agents.py'}:full_disk"
workers = 1

[store]
url = "full://store"

[trainer]
name = "export"
formats = ["jsonl"]

[plugins]
modules = ["full_store"]
""")
    exe = Path(sys.executable).with_name("rollhub")
    env = {**__import__("os").environ, "PYTHONPATH": str(root)}
    out = subprocess.run([str(exe), "run", "rollhub.toml", "--run-dir", "run"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=180, env=env)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "6 results could not be stored (store_error)" in out.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["by_status"] == {"store_error": 6}
    assert "No space left on device" in json.dumps(summary)


@aio
async def test_store_failure_seen_while_the_submit_answer_is_late_frees_the_slot(tmp_path) -> None:
    """The app fails to store and the liveness poll reports it before the client has read
    the worker's answer to ``POST /invocations`` (a loaded client): the slot must still be
    freed, not re-taken by the late answer and held for the worker's whole life."""
    root = tmp_path / "not-a-dir"
    root.write_text("x")
    store = FileResultStore(root, fsync=False)
    rt = make_runtime(workers=1, ping_interval_s=0.1)
    async with rt, AsyncRolloutClient(rt, store, exp_id="late", callbacks=False) as client:
        http = rt._http
        real = http.request

        posts = 0

        async def late_answer(method, port, path, **kw):
            nonlocal posts
            response = await real(method, port, path, **kw)
            if method == "POST" and path == "/invocations":
                posts += 1
                if posts > 1:  # the first is read at once, so the poll lists the worker's
                    await asyncio.sleep(1.0)  # sessions while the others' answers wait
            return response

        http.request = late_answer
        outs = [await f for f in [client.invoke({"x": i}, timeout=30) for i in range(4)]]
        await asyncio.sleep(0.5)  # a few more polls: nothing left to free by then
        load = sum(rt.load().values())
    assert [o.status for o in outs] == ["store_error"] * 4
    assert load == 0
