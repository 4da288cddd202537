"""Chatty, hanging and huge agents never stall a worker pool."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from rollhub.client import AsyncRolloutClient

from tests.reliability.local_pools import LONG, make_runtime, pid_alive

aio = pytest.mark.asyncio(loop_scope="function")


@aio
async def test_chatty_agent_never_wedges_a_worker(store, caplog) -> None:
    """4 KB per rollout to stdout and stderr for well past the 64 KiB pipe buffers."""
    n = 400 if LONG else 150
    caplog.set_level(logging.INFO, logger="rollhub.runtimes.local_output")
    # The default liveness period: a tight one kills busy workers on a loaded machine.
    rt = make_runtime("chatty", ping_interval_s=1.0)
    async with rt, AsyncRolloutClient(rt, store, exp_id="chat") as client:
        futures = [
            client.invoke({"x": i, "stdout_bytes": 4096, "stderr_bytes": 4096}, timeout=30)
            for i in range(n)
        ]
        outs = [await f for f in futures]
    assert [o.status for o in outs].count("ok") == n
    logged = [r for r in caplog.records if r.name == "rollhub.runtimes.local_output"]
    assert any("stdout: oooo" in r.getMessage() for r in logged)
    assert any("stderr: eeee" in r.getMessage() for r in logged)
    # Rate limited: far fewer lines in the log than written, and the rest counted.
    assert len(logged) < 2 * n
    assert any("output lines not logged" in r.getMessage() for r in logged)
    assert all(len(r.getMessage()) < 2200 for r in logged)


@aio
async def test_megabyte_without_newline_on_stderr_and_stdout(store, caplog) -> None:
    caplog.set_level(logging.INFO, logger="rollhub.runtimes.local_output")
    rt = make_runtime("chatty", workers=1)
    async with rt, AsyncRolloutClient(rt, store, exp_id="mb") as client:
        payload = {"stderr_bytes": 1 << 20, "stdout_bytes": 1 << 20, "newline": False}
        first = [await client.invoke({**payload, "x": i}, timeout=20) for i in range(3)]
        after = await client.invoke({"x": "after"}, timeout=10)
    assert [o.status for o in first] == ["ok"] * 3 and after.ok
    assert any("characters)" in r.getMessage() for r in caplog.records)


@aio
async def test_hung_sync_handlers_get_the_worker_replaced(store) -> None:
    """8 hung handlers on a 4-thread pool: /ping turns Unhealthy, the worker is replaced."""
    rt = make_runtime("hanging", workers=1, ping_interval_s=0.2)
    async with rt, AsyncRolloutClient(rt, store, exp_id="hang") as client:
        old_pid = rt.worker_pids()[0]
        assert (await client.invoke({"x": "warm-up"}, timeout=30)).ok
        hung = [client.invoke({"mode": "hang", "seconds": 30, "x": i}) for i in range(8)]
        # Long enough for four handlers to be running in their threads on a busy machine.
        timed_out = await asyncio.gather(*(f.result_async(timeout=2.0) for f in hung))
        assert {o.status for o in timed_out} == {"timeout"}
        # Submitted while the pool is stuck: refused (503, retried) or lost with a cause,
        # never left to time out.
        during = [client.invoke({"x": i}, timeout=20) for i in range(10)]
        started = time.monotonic()
        while old_pid in rt.worker_pids() and time.monotonic() - started < 15:
            await asyncio.sleep(0.05)
        recovery = time.monotonic() - started
        assert old_pid not in rt.worker_pids(), "the stuck worker was never replaced"
        for o in [await f for f in during]:
            assert o.status == "ok" or (o.status == "agent_error" and "exited" in o.error.message)
        outs = [await f for f in [client.invoke({"x": i}, timeout=20) for i in range(40)]]
        assert [o.status for o in outs].count("ok") == 40
        assert rt.workers_started == 2
        assert recovery < 10, f"replaced after {recovery:.1f}s"
    assert not pid_alive(old_pid)


@aio
async def test_close_waits_for_workers_still_starting(store) -> None:
    rt = make_runtime("noop", workers=2)
    await rt.start()
    pids = rt.worker_pids()
    import os
    import signal

    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    # Let the watcher notice and begin starting replacements, then close at once.
    deadline = time.monotonic() + 5
    while rt.workers_started == 2 and time.monotonic() < deadline and not rt._replacing:
        await asyncio.sleep(0.01)
    await rt.close()
    children = _children()
    assert not children, f"processes left after close(): {children}"


def _children() -> list[int]:
    import os

    me = str(os.getpid())
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if fields[1] == me and fields[0] != "Z":
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    cmd = fh.read()
            except FileNotFoundError:
                continue
            if b"local_worker" in cmd:
                found.append(int(entry))
    return found
