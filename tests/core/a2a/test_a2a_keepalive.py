"""A session queued for a run slot keeps its parked task alive: the served app evicts a
parked task nobody touches, and a session waiting its turn must not look like a dead
client."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from rollhub.a2a.executor import SessionExecutor
from rollhub.a2a.server import a2a_app
from rollhub.a2a.taskstore import EvictingTaskStore
from rollhub.runtimes.a2a import A2ARuntimeOptions, A2ASession
from rollhub.sessions import SessionBounds, SessionsConfig, drive_session
from rollhub.sessions.base import SessionDump
from rollhub.testing.servers import serve_app


class SlowRuns(SessionExecutor):
    """Each run takes a while, so the second session waits for the only run slot."""

    def __init__(self) -> None:
        super().__init__()
        self.cleaned: list[str] = []

    async def setup_task(self, task_input: dict[str, Any], session_id: str) -> None:
        return None

    async def run_task(self, task_input: dict[str, Any], session_id: str) -> SessionDump:
        await asyncio.sleep(1.2)
        return SessionDump.from_result({"rewards": 1.0})

    async def cleanup_task(self, task_id: str) -> None:
        self.cleaned.append(task_id)


@pytest.mark.parametrize("keepalive_s", [None, 0.1])
async def test_a_session_waiting_for_a_run_slot_keeps_its_task(keepalive_s):
    executor = SlowRuns()
    store = EvictingTaskStore(parked_idle_s=0.5, sweep_s=0.05)
    # None: a keepalive too rare to matter, as before sessions kept their tasks alive
    config = SessionsConfig(setup_slots=2, run_slots=1, keepalive_s=keepalive_s or 3600.0)
    bounds = SessionBounds.from_config(config, concurrency=2, timeout_s=30.0)
    with serve_app(a2a_app(executor, task_store=store)) as url:
        options = A2ARuntimeOptions(target="url", url=url + "/", poll_max_s=0.05)
        outs = await asyncio.gather(*(
            drive_session(A2ASession(f"s{i}", options), {"i": i}, bounds) for i in range(2)
        ))  # fmt: skip
    waited = max(o.phases["run_wait_s"] for o in outs)
    assert waited > 1.0  # the second one waited twice the idle bound for its run slot
    if keepalive_s is None:
        lost = [o for o in outs if o.status != "ok"]
        assert len(lost) == 1 and lost[0].transient and "evicted" in lost[0].error.message
    else:
        assert [o.status for o in outs] == ["ok", "ok"] and executor.cleaned == []


def test_keepalive_is_set_in_the_sessions_table():
    from rollhub.config import parse_config
    from rollhub.errors import ConfigError

    head = {"runtime": {"name": "a2a"}}
    config = parse_config({**head, "sessions": {"keepalive_s": 20}}, env={})
    assert config.sessions.keepalive_s == 20.0
    assert SessionBounds.from_config(config.sessions, concurrency=2, timeout_s=5).keepalive_s == 20
    with pytest.raises(ConfigError, match="keepalive_s") as info:
        parse_config({**head, "sessions": {"keepalive_s": 0}}, env={})
    assert info.value.field == "sessions.keepalive_s"
