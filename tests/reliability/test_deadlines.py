"""A rollout reported as timed out never turns into an ok result on resume."""

from __future__ import annotations

import random

import pytest
from rollhub.client import AsyncRolloutClient

from tests.reliability.local_pools import LONG, make_runtime

aio = pytest.mark.asyncio(loop_scope="function")


@aio
async def test_resume_agrees_with_what_the_run_reported(store) -> None:
    n = 300 if LONG else 80
    rng = random.Random(4)
    payloads = [{"id": f"d{i}", "seconds": rng.uniform(0.02, 0.6)} for i in range(n)]
    rt = make_runtime(workers=2)
    async with rt:
        async with AsyncRolloutClient(rt, store, exp_id="dl") as client:
            for i in range(8):  # warm the workers up: first calls import the HTTP stack
                assert (await client.invoke({"x": i}, timeout=30, input_id=f"w{i}")).ok
            first = {
                i.input_id: i.status
                async for i in client.run_batch_async(payloads, max_concurrent=16, timeout=0.35)
            }
        await rt.close()  # every late handler ends and writes before we look
        assert set(first.values()) <= {"ok", "timeout"}
        assert "ok" in first.values() and "timeout" in first.values()
        await rt.start()
        async with AsyncRolloutClient(rt, store, exp_id="dl") as client:
            again = [i async for i in client.run_batch_async(payloads, rerun_failed=False)]
    resumed = {i.input_id: i.status for i in again if i.resumed}
    # Every input whose result was stored is resumed with the status the first run gave it.
    for input_id, status in resumed.items():
        assert status == first[input_id], (input_id, status, first[input_id])
    assert {k for k, v in first.items() if v == "ok"} <= set(resumed)
