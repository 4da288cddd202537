"""How a loop thread starts and stops: running once started, pending work dropped at stop,
a blocked loop left open, and a stop from another event loop that does not block it."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

from rollhub.lifetimes.loop_thread import LoopThread


def test_started_loop_runs_on_a_named_thread_until_stopped():
    lt = LoopThread("named")
    loop = lt.start()
    assert lt.running and lt.start() is loop and lt.loop is loop
    thread = lt.call(threading.current_thread)
    assert thread.name == "named" and thread.daemon
    assert lt.stop() is True
    assert not thread.is_alive() and loop.is_closed() and not lt.running


def test_stop_drops_pending_tasks_without_cancelling_them():
    lt = LoopThread("dropping")
    ended = threading.Event()

    async def pending() -> None:
        try:
            await asyncio.sleep(60)
        finally:
            ended.set()

    lt.call(lambda: asyncio.get_running_loop().create_task(pending()))
    loop = lt.loop
    assert lt.stop() is True
    assert loop.is_closed() and not ended.is_set()


def test_a_blocked_loop_is_left_open_and_a_later_use_starts_afresh(caplog):
    lt = LoopThread("blocked")
    release = threading.Event()
    loop = lt.loop
    lt.call_soon(release.wait, 10)
    with caplog.at_level(logging.WARNING, logger="rollhub.lifetimes.loop_thread"):
        assert lt.stop(join_timeout=0.1) is False
    assert "'blocked' did not stop within 0.1s" in caplog.text
    assert not loop.is_closed() and not lt.running
    assert lt.run(asyncio.sleep(0, "fresh")) == "fresh" and lt.loop is not loop
    release.set()
    lt.stop()
    assert lt.stop() is True  # idempotent


async def test_stop_async_waits_without_blocking_the_callers_loop():
    lt = LoopThread("stopped-async")
    loop = lt.loop
    lt.call_soon(time.sleep, 0.3)  # the thread ends only after this
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    ticker = asyncio.create_task(tick())
    try:
        assert await lt.stop_async() is True
    finally:
        ticker.cancel()
    assert loop.is_closed() and ticks > 5
