"""Parked tasks whose client never comes back: the served app lets them go after a bound
(idle time, or a grace past the rollout's deadline), frees what their setup holds, and a
client that does come back gets a typed error that ends its session as lost."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from a2a.server.context import ServerCallContext
from a2a.types import GetTaskRequest, ListTasksRequest, Task, TaskState, TaskStatus
from a2a.utils.errors import TaskNotFoundError
from google.protobuf.struct_pb2 import Struct
from rollhub.a2a.client import A2ATaskClient, build_a2a_client
from rollhub.a2a.executor import SessionExecutor
from rollhub.a2a.server import a2a_app
from rollhub.a2a.taskstore import EvictingTaskStore
from rollhub.a2a.wire import PARKED_DEADLINE_KEY
from rollhub.errors import SessionError
from rollhub.sessions.base import SessionDump
from rollhub.testing.servers import serve_app

from tests.core.a2a.waiting import until

TASK = {"a": 1, "b": 2}


class Sandboxes(SessionExecutor):
    """Setup opens a sandbox per session; a cancel or an eviction closes it."""

    def __init__(self) -> None:
        super().__init__()
        self.opened: list[str] = []
        self.cleaned: list[str] = []

    async def setup_task(self, task_input: dict[str, Any], session_id: str) -> None:
        self.opened.append(session_id)

    async def run_task(self, task_input: dict[str, Any], session_id: str) -> SessionDump:
        return SessionDump.from_result({"rewards": 1.0})

    async def cleanup_task(self, task_id: str) -> None:
        self.cleaned.append(task_id)


async def test_a_parked_task_whose_client_died_is_evicted_and_cleaned_up():
    executor = Sandboxes()
    store = EvictingTaskStore(parked_idle_s=0.3, sweep_s=0.05)
    served = a2a_app(executor, task_store=store)
    workers = served.state.handler._active_task_registry._active_tasks  # the SDK's, per task
    with serve_app(served) as url:
        async with httpx.AsyncClient() as http:
            a2a = build_a2a_client(http, url + "/")
            client = A2ATaskClient(a2a, "s-gone", poll_max_s=0.05)
            await client.setup(TASK)
            assert client.task_id in workers
            # the client died: nothing touches the task from now on
            await until(lambda: executor.cleaned and client.task_id not in workers)
            listed = await a2a.list_tasks(ListTasksRequest(context_id="s-gone"))
            with pytest.raises(TaskNotFoundError) as polled:
                await a2a.get_task(GetTaskRequest(id=client.task_id))
            started = time.monotonic()
            with pytest.raises(SessionError) as info:  # it came back after all
                await client.run(TASK)
            took = time.monotonic() - started
    assert executor.cleaned == [client.task_id]  # what its setup held is freed
    assert list(listed.tasks) == [] and store.parked == 0
    assert "evicted" in str(polled.value) and "parked_idle_s" in str(polled.value)
    # lost with the server's session, as a restart loses it: a new session may succeed
    assert info.value.transient and info.value.phase == "run" and took < 2
    assert "evicted" in str(info.value)


async def test_a_client_that_keeps_reading_its_parked_task_keeps_it():
    executor = Sandboxes()
    store = EvictingTaskStore(parked_idle_s=0.6, sweep_s=0.05)
    with serve_app(a2a_app(executor, task_store=store)) as url:
        async with httpx.AsyncClient() as http:
            client = A2ATaskClient(build_a2a_client(http, url + "/"), "s-alive", poll_max_s=0.05)
            await client.setup(TASK)
            for _ in range(12):  # 1.2 s parked in all, never 0.6 s untouched
                await client._get()
                await asyncio.sleep(0.1)
            dump = await client.run(TASK)
    assert dump.ok and executor.cleaned == []


async def test_by_default_a_parked_task_goes_a_grace_after_its_rollouts_deadline():
    executor = Sandboxes()
    store = EvictingTaskStore(deadline_grace_s=0.2, sweep_s=0.05)
    with serve_app(a2a_app(executor, task_store=store)) as url:
        async with httpx.AsyncClient() as http:
            a2a = build_a2a_client(http, url + "/")
            late = A2ATaskClient(a2a, "s-deadline", poll_max_s=0.05)
            await late.setup({**TASK, "_rollout": {"deadline_at": time.time() + 1.0}})
            dated = (await late._get()).metadata
            patient = A2ATaskClient(a2a, "s-no-deadline", poll_max_s=0.05)
            await patient.setup(TASK)
            held = (await patient._get()).metadata
            await until(lambda: executor.cleaned)
            await asyncio.sleep(0.3)  # time for a wrong second eviction to show
            dump = await patient.run(TASK)  # no deadline: the 1 h default holds it
    assert executor.cleaned == [late.task_id]
    assert dump.ok and PARKED_DEADLINE_KEY in dated and PARKED_DEADLINE_KEY not in held


def _parked(task_id: str, deadline_at: float | None = None) -> Task:
    task = Task(id=task_id, context_id=task_id,
                status=TaskStatus(state=TaskState.TASK_STATE_INPUT_REQUIRED))  # fmt: skip
    if deadline_at is not None:
        metadata = Struct()
        metadata.update({PARKED_DEADLINE_KEY: deadline_at})
        task.metadata.CopyFrom(metadata)
    return task


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def test_the_parked_bound_idle_deadline_and_held_tasks():
    mono, wall = Clock(100.0), Clock(1_000_000.0)
    store = EvictingTaskStore(deadline_grace_s=60, clock=mono, wall_clock=wall)
    ctx = ServerCallContext()
    await store.save(_parked("idle"), ctx)
    await store.save(_parked("dated", deadline_at=wall.now + 100), ctx)
    await store.save(_parked("held"), ctx)
    mono.now += 3599
    wall.now += 159
    store.touch("idle")  # a read restarts the idle clock, not the deadline's
    store.touch("dated")
    assert store.take_expired_parked() == []
    wall.now += 2
    assert [t for t, _, _ in store.take_expired_parked()] == ["dated"]
    with store.holding("held"):  # a message to it is being handled
        mono.now += 2
        assert store.take_expired_parked() == []
    assert store.take_expired_parked() == []  # released: its idle clock starts again
    mono.now += 3599
    assert [t for t, _, _ in store.take_expired_parked()] == ["idle"]
    mono.now += 2
    assert [t for t, _, _ in store.take_expired_parked()] == ["held"]
    # a bound given explicitly is the bound of every parked task, deadline or not
    short = EvictingTaskStore(parked_idle_s=10, clock=mono, wall_clock=wall)
    await short.save(_parked("dated", deadline_at=wall.now + 1000), ctx)
    mono.now += 11
    assert [t for t, _, _ in short.take_expired_parked()] == ["dated"]
