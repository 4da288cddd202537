"""Async handlers run on one worker event loop in its own thread: started on first use,
stopped and closed at shutdown (after the rollouts' results are stored), started afresh by
a later rollout."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from rollhub.app import RolloutApp
from rollhub.rollout import RESULT_META_KEY

WORKER = "rollhub-worker-loop"


def worker_threads(besides: frozenset[threading.Thread] = frozenset()) -> list[threading.Thread]:
    """The worker-loop threads alive now, except ``besides`` (those of apps that earlier
    tests in this process left running)."""
    return [t for t in threading.enumerate() if t.name == WORKER and t not in besides]


async def test_handlers_run_on_the_worker_loop_which_shutdown_closes(
    make_rollout: Callable, read_doc: Callable
) -> None:
    app = RolloutApp()
    others = frozenset(worker_threads())
    seen: list[tuple[str, asyncio.AbstractEventLoop]] = []

    @app.rollout_entrypoint
    async def handler(payload: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0.01)
        seen.append((threading.current_thread().name, asyncio.get_running_loop()))
        return {"rewards": 1.0}

    assert worker_threads(others) == []  # nothing starts before an async handler needs it
    for session in ("first", "second"):
        run = app.start_rollout({"_rollout": make_rollout(session)})
        await run.task
        assert read_doc(session)[RESULT_META_KEY]["status"] == "ok"
        assert len(worker_threads(others)) == 1
        await app.shutdown()
        assert worker_threads(others) == []
    (name, first), (_, second) = seen
    assert name == WORKER and first is not asyncio.get_running_loop()
    assert first is not second and first.is_closed() and second.is_closed()
    await app.shutdown()  # nothing left to stop


async def test_a_rollout_in_flight_at_shutdown_stores_its_cancellation(
    make_rollout: Callable, read_doc: Callable
) -> None:
    """What a handler leaves on the worker loop after its cancellation is not waited for:
    its result is the cancellation, stored once, and the loop stops under it."""
    app = RolloutApp(shutdown_wait_s=5)
    others = frozenset(worker_threads())
    started, cleaned_up = threading.Event(), threading.Event()
    loops: list[asyncio.AbstractEventLoop] = []

    @app.rollout_entrypoint
    async def slow_to_die(payload: dict[str, Any]) -> dict[str, Any]:
        loops.append(asyncio.get_running_loop())
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            await asyncio.sleep(5)  # a handler slow to clean up
            cleaned_up.set()
            raise
        return {"rewards": 1.0}

    run = app.start_rollout({"_rollout": make_rollout("live")})
    assert await asyncio.to_thread(started.wait, 10)
    await app.shutdown()
    assert run.task.done()
    meta = read_doc("live")[RESULT_META_KEY]
    assert meta["error"]["type"] == "CancelledError" and "shut down" in meta["error"]["message"]
    assert worker_threads(others) == [] and loops[0].is_closed() and not cleaned_up.is_set()
