"""The ray runtime on a local Ray (2 CPUs, no dashboard, loopback)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest
import pytest_asyncio
from rollhub.client import AsyncRolloutClient
from rollhub.stores.file import FileResultStore

ray = pytest.importorskip("ray", reason="Ray is an optional dependency (rollhub[ray])")

pytestmark = pytest.mark.asyncio(loop_scope="module")

AGENT = str(Path(__file__).with_name("noop_agent.py")) + ":app"


@pytest.fixture(scope="module")
def local_ray():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_AUTH_MODE", "disabled")  # no token file for a throwaway cluster
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            log_to_driver=False,
            configure_logging=False,
        )
        try:
            yield
        finally:
            ray.shutdown()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def ray_runtime(local_ray):
    from rollhub.runtimes.ray import RayRuntime

    rt = RayRuntime(app=AGENT, actors=2)
    await rt.start()
    try:
        yield rt
    finally:
        await rt.close()


@pytest_asyncio.fixture(loop_scope="module")
async def ray_client(ray_runtime, tmp_path):
    store = FileResultStore(tmp_path / "results", fsync=False)
    async with AsyncRolloutClient(ray_runtime, store, exp_id="ray") as c:
        yield c


async def test_rollouts_run_in_actors_and_store_app_documents(ray_client) -> None:
    assert ray_client.callback_url is not None  # a local cluster reaches the loopback server
    ok, bad = await asyncio.gather(
        ray_client.invoke({"x": 5}), ray_client.invoke({"mode": "fail", "x": 6})
    )
    assert ok.status == "ok" and ok.result["x"] == 5
    assert ok.result["pid"] != os.getpid()  # it ran in a Ray worker process
    assert ok.meta["session_id"] == ok.session_id and ok.meta["status"] == "ok"
    assert bad.status == "agent_error" and bad.error.type == "ValueError"
    # a notice is sent after the result is stored, and the actor's own "done" may reach
    # the client first: wait for both notices rather than read the count at once
    deadline = time.monotonic() + 30
    while ray_client.stats["callbacks"] < 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert ray_client.stats["callbacks"] == 2


async def test_batch_on_ray(ray_client) -> None:
    items = [
        i
        async for i in ray_client.run_batch_async(
            [{"x": i} for i in range(40)], max_concurrent=16, progress=False
        )
    ]
    assert sorted(i.index for i in items) == list(range(40))
    assert {i.status for i in items} == {"ok"}


async def test_cancel_stores_a_cancelled_result(ray_client) -> None:
    fut = await ray_client.invoke_async({"mode": "hang"})
    assert fut.receipt.result_location.endswith(fut.result_key)
    fut.cancel()  # right after the receipt: the actor already runs the session
    assert (await fut).status == "cancelled"
    await ray_client._watch.settle()
    doc = ray_client.store.get(fut.result_key)
    assert doc is not None and doc["_rollhub"]["error"]["type"] == "CancelledError"


async def test_cancel_is_served_when_every_slot_is_busy(local_ray, tmp_path) -> None:
    from rollhub.runtimes.ray import RayRuntime

    store = FileResultStore(tmp_path / "busy", fsync=False)
    rt = RayRuntime(app=AGENT, actors=1, max_concurrency_per_actor=2)
    async with rt, AsyncRolloutClient(rt, store, exp_id="busy") as client:
        futs = [await client.invoke_async({"mode": "hang", "n": i}) for i in range(2)]
        for fut in futs:
            fut.cancel()
        await asyncio.wait_for(client._watch.settle(), 10)
        for fut in futs:
            assert store.get(fut.result_key)["_rollhub"]["error"]["type"] == "CancelledError"


async def test_dead_actor_loses_its_sessions_and_is_replaced(ray_client, ray_runtime) -> None:
    fut = await ray_client.invoke_async({"mode": "hang"})
    actor = ray_runtime._where[fut.session_id]
    started = ray_runtime.actors_started
    t0 = time.monotonic()
    first_sid = fut.session_id
    ray.kill(actor.handle, no_restart=True)
    # the lost session is seen at once and the rollout goes to a new session on a live actor
    while fut.session_id == first_sid and time.monotonic() - t0 < 10:
        await asyncio.sleep(0.05)
    assert fut.session_id == f"{first_sid}-r1"
    while fut.session_id not in ray_runtime._where and time.monotonic() - t0 < 10:
        await asyncio.sleep(0.05)
    assert ray_runtime._where[fut.session_id] is not actor
    fut.cancel()
    outcome = await fut.result_async(timeout=30)
    assert outcome.status == "cancelled"
    (dead,) = outcome.dead_sessions
    assert dead["session_id"] == first_sid and "lost" in dead["cause"]
    deadline = time.monotonic() + 20
    while ray_runtime.actors_started == started and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert ray_runtime.actors_started == started + 1
    assert len(ray_runtime.load()) == 2


async def test_an_idle_actor_whose_process_dies_is_replaced_before_a_rollout_meets_it(
    ray_runtime,
) -> None:
    # A worker killed by the kernel (out of memory, a crash) on a node that lives on: no
    # call of a rollout fails and Ray's node table has nothing to say, yet the pool must
    # not keep counting the actor.
    import signal

    deadline = time.monotonic() + 30
    while not (idle := [a for a in ray_runtime.pool.actors if not a.sessions]):
        assert time.monotonic() < deadline, "no actor went idle"
        await asyncio.sleep(0.05)
    actor = idle[0]
    pid = (await actor.handle.ready.remote())["pid"]
    started = ray_runtime.actors_started
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 20
    while ray_runtime.actors_started == started and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert ray_runtime.actors_started == started + 1, "the dead actor was not replaced"
    assert actor not in ray_runtime.pool.actors
    assert len(ray_runtime.load()) == 2
