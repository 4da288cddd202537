"""The local runtime's worker pool: routing, liveness, replacement, no orphans."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from rollhub.errors import ConfigError, RollhubError
from rollhub.rollout import RolloutConfig, RolloutRequest
from rollhub.runtimes.local import LocalRuntime

aio = pytest.mark.asyncio(loop_scope="module")


def request(store, sid: str, **payload) -> RolloutRequest:
    rollout = RolloutConfig(exp_id="lr", input_id="i", session_id=sid, result_store=store.url)
    return RolloutRequest(payload=payload, rollout=rollout)


@aio
async def test_least_loaded_routing_and_finish(runtime, store) -> None:
    sids = [f"route-{i}-{'x' * 30}" for i in range(10)]
    for sid in sids:
        await runtime.submit(request(store, sid, mode="hang"))
    assert sorted(runtime.load().values()) == [5, 5]
    for sid in sids:
        await runtime.cancel(sid)
    assert sum(runtime.load().values()) == 0


@aio
async def test_rejected_payload_is_permanent_submission_error(runtime, store) -> None:
    from rollhub.errors import SubmissionError

    req = request(store, "bad-" + "y" * 30)
    req.rollout.__dict__["exp_id"] = "has/slash"  # bypass client-side validation on purpose
    with pytest.raises(SubmissionError) as info:
        await runtime.submit(req)
    assert info.value.transient is False and info.value.status_code == 400
    assert "exp_id" in str(info.value)


@aio
async def test_concurrency_cap_per_worker_waits_for_a_slot(make_runtime, store) -> None:
    rt = make_runtime(workers=1, max_concurrency_per_worker=2)
    async with rt:
        await rt.submit(request(store, "cap-a-" + "z" * 30, mode="hang"))
        await rt.submit(request(store, "cap-b-" + "z" * 30, mode="hang"))
        third = asyncio.ensure_future(rt.submit(request(store, "cap-c-" + "z" * 30, mode="hang")))
        await asyncio.sleep(0.3)
        assert not third.done()
        await rt.cancel("cap-a-" + "z" * 30)
        await asyncio.wait_for(third, 3)
        assert rt.load() == {0: 2}


@aio
async def test_unresponsive_worker_is_killed_and_replaced(fresh_runtime, store) -> None:
    rt = fresh_runtime
    lost: list[tuple[str, str]] = []
    rt.on_session_lost(lambda sid, reason: lost.append((sid, reason)))
    sid = "stuck-" + "w" * 30
    receipt = await rt.submit(request(store, sid, mode="hang"))
    pid = receipt.details["pid"]
    os.kill(pid, signal.SIGSTOP)  # alive but silent: only /ping can tell
    deadline = time.monotonic() + 8
    while not lost and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert lost and lost[0][0] == sid and "exited" in lost[0][1]
    while len(rt.worker_pids()) < 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert pid not in rt.worker_pids() and len(rt.worker_pids()) == 2
    assert rt.workers_started == 3


@aio
async def test_bad_app_reference_fails_start_with_the_worker_error(tmp_path) -> None:
    bad = tmp_path / "broken_agent.py"
    bad.write_text("raise RuntimeError('the agent module is broken')\n")
    rt = LocalRuntime(app=f"{bad}:app", workers=1, startup_timeout_s=20)
    with pytest.raises(RollhubError, match="the agent module is broken"):
        await rt.start()
    rt2 = LocalRuntime(
        app="broken_agent.py:nope", workers=1, startup_timeout_s=20, base_dir=tmp_path
    )
    assert rt2.app_ref == f"{bad.resolve()}:nope"


@aio
async def test_options_are_validated() -> None:
    with pytest.raises(ConfigError, match="app"):
        LocalRuntime(workers=2)
    with pytest.raises(ConfigError, match="worker"):
        LocalRuntime(app="a.py:app", workers=0)
    with pytest.raises(ConfigError, match="wrokers"):
        LocalRuntime(app="a.py:app", wrokers=2)


def test_no_orphans_after_parent_is_killed(tmp_path) -> None:
    from pathlib import Path

    agent = str(Path(__file__).with_name("noop_agent.py")) + ":app"
    script = textwrap.dedent(
        f"""
        import asyncio, json, sys
        from rollhub.runtimes.local import LocalRuntime
        async def main():
            rt = LocalRuntime(app={agent!r}, workers=2)
            await rt.start()
            print(json.dumps(rt.worker_pids()), flush=True)
            await asyncio.sleep(60)
        asyncio.run(main())
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        pids = json.loads(parent.stdout.readline())
        assert len(pids) == 2 and all(_alive(p) for p in pids)
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 5
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in pids)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


@aio
async def test_slots_of_sessions_that_ended_on_their_own_are_freed(runtime, store) -> None:
    # No client calls finish(): the liveness check's GET /rollouts frees the slots.
    for i in range(4):
        await runtime.submit(request(store, f"own-{i}-{'v' * 30}", x=i))
    assert sum(runtime.load().values()) == 4
    deadline = time.monotonic() + 5
    while sum(runtime.load().values()) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert sum(runtime.load().values()) == 0
    assert all(store.get(f"lr/i/own-{i}-{'v' * 30}.json") for i in range(4))
