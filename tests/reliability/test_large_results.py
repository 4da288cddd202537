"""Huge results: capped with a clear error, and they do not stall other rollouts."""

from __future__ import annotations

import asyncio
import time

import pytest
from rollhub.client import AsyncRolloutClient
from rollhub.errors import ConfigError

from tests.reliability.local_pools import make_runtime

aio = pytest.mark.asyncio(loop_scope="function")


@aio
async def test_result_over_the_cap_is_a_clear_error_and_the_loop_keeps_ticking(store) -> None:
    rt = make_runtime("huge", workers=1)
    gaps: list[float] = []

    async def ticker(stop: asyncio.Event) -> None:
        last = time.monotonic()
        while not stop.is_set():
            await asyncio.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    async with rt, AsyncRolloutClient(rt, store, exp_id="big", max_result_bytes=8 << 20) as c:
        stop = asyncio.Event()
        tick = asyncio.create_task(ticker(stop))
        over = await c.invoke({"bytes": 50 << 20}, timeout=60)
        under = await c.invoke({"bytes": 2 << 20}, timeout=60)
        stop.set()
        await tick
    assert over.status == "agent_error" and over.error.type == "ResultTooLarge"
    assert "max_result_bytes=8388608" in over.error.message
    assert under.ok and len(under.result["blob"]) == 2 << 20
    # 50 MB parsed on the loop stalled it for most of a second; capped, it never is.
    assert max(gaps) < 0.3, f"the client's loop stalled for {max(gaps):.2f}s"


@aio
async def test_bad_cap_is_a_config_error(store) -> None:
    with pytest.raises(ConfigError, match="max_result_bytes"):
        AsyncRolloutClient(make_runtime(), store, exp_id="x", max_result_bytes=0)
