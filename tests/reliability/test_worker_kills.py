"""Workers SIGKILLed during a batch: exactly one outcome per payload, causes given, no orphans."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import signal
import time

import pytest
from rollhub.client import AsyncRolloutClient

from tests.reliability.conftest import LONG, make_runtime, pid_alive

aio = pytest.mark.asyncio(loop_scope="function")
log = logging.getLogger(__name__)


@aio
async def test_sigkills_during_a_batch(store) -> None:
    n = 800 if LONG else 160
    rng = random.Random(14)
    payloads = [{"id": f"p{i}", "seconds": rng.uniform(0.2, 0.6)} for i in range(n)]
    rt = make_runtime(workers=2)
    killed: list[int] = []
    seen: set[int] = set()
    async with rt, AsyncRolloutClient(rt, store, exp_id="kills") as client:
        stop = asyncio.Event()

        async def killer() -> None:
            while not stop.is_set():
                await asyncio.sleep(rng.uniform(0.3, 1.0))
                pids = rt.worker_pids()
                seen.update(pids)
                if pids and not stop.is_set():
                    pid = rng.choice(pids)
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)

        task = asyncio.create_task(killer())
        started = time.monotonic()
        items = [i async for i in client.run_batch_async(payloads, max_concurrent=32, timeout=30)]
        elapsed = time.monotonic() - started
        stop.set()
        await task
        seen.update(rt.worker_pids())
    statuses = [i.status for i in items]
    assert sorted(i.index for i in items) == list(range(n))  # one item per payload
    assert len({i.session_id for i in items}) == n
    # A worker killed while a session is on it: agent_error (lost). Every worker dead
    # during all submission retries: submit_error. Either way the cause is given.
    assert set(statuses) <= {"ok", "agent_error", "submit_error"}, set(statuses)
    lost = [i for i in items if i.status != "ok"]
    for item in lost:
        assert item.error is not None
        if item.status == "agent_error":
            assert "exited with code -9" in item.error.message, item.error
        else:
            assert "did not take session" in item.error.message, item.error
    # A stored ok document for a rollout reported as failed would count twice on resume.
    stored = {k.rsplit("/", 1)[1][: -len(".json")]: k for k in store.list("kills/")}
    duplicated = [i for i in lost if i.session_id in stored]
    assert not duplicated
    assert len(killed) >= 2
    assert not [p for p in seen if pid_alive(p)], "worker processes outlived the runtime"
    figures = {
        "rollouts": n, "ok": n - len(lost), "lost": statuses.count("agent_error"),
        "submit_error": statuses.count("submit_error"), "duplicated": len(duplicated),
        "kills": len(killed), "elapsed_s": round(elapsed, 1),
    }  # fmt: skip
    print("worker-kill figures:", json.dumps(figures))
