"""Evictions and messages racing: the parked tasks one sweep evicts are all refused from
the moment the sweep took them, so a run message sent while an earlier one of them is
still being cleaned up never starts a rollout the eviction then cancels."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from rollhub.a2a.client import A2ATaskClient, build_a2a_client
from rollhub.a2a.executor import SessionExecutor
from rollhub.a2a.server import a2a_app
from rollhub.a2a.taskstore import EvictingTaskStore
from rollhub.errors import SessionError
from rollhub.sessions.base import SessionDump
from rollhub.testing.servers import serve_app

from tests.core.a2a.waiting import until


class SlowCleanup(SessionExecutor):
    """The first cleanup takes a while (a sandbox being deleted); runs take a while too."""

    def __init__(self) -> None:
        super().__init__()
        self.runs: list[str] = []
        self.cleaned: list[str] = []
        self.cleaning = asyncio.Event()

    async def setup_task(self, task_input: dict[str, Any], session_id: str) -> None:
        return None

    async def run_task(self, task_input: dict[str, Any], session_id: str) -> SessionDump:
        self.runs.append(session_id)
        await asyncio.sleep(1.0)
        return SessionDump.from_result({"rewards": 1.0})

    async def cleanup_task(self, task_id: str) -> None:
        self.cleaned.append(task_id)
        if len(self.cleaned) == 1:
            self.cleaning.set()
            await asyncio.sleep(0.6)


async def test_a_run_message_to_a_task_one_sweep_evicts_never_starts_it():
    executor = SlowCleanup()
    # one sweep, 0.5 s after the first message, finds both tasks past their idle bound
    store = EvictingTaskStore(parked_idle_s=0.2, sweep_s=0.5)
    with serve_app(a2a_app(executor, task_store=store)) as url:
        async with httpx.AsyncClient() as http:
            a2a = build_a2a_client(http, url + "/")
            first = A2ATaskClient(a2a, "s-first", poll_max_s=0.05)
            second = A2ATaskClient(a2a, "s-second", poll_max_s=0.05)
            await first.setup({})
            await second.setup({})
            await until(executor.cleaning.is_set)  # the sweep is cleaning up the first
            with pytest.raises(SessionError) as info:
                await second.run({})
            await until(lambda: len(executor.cleaned) == 2)
    # its rollout never started: it was not run part way only to be cancelled
    assert executor.runs == []
    assert info.value.transient and "evicted" in str(info.value)
