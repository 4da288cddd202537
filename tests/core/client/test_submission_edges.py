"""Edges of the submission path on real worker processes and a real file store.

Cancels that land before a rollout's task first ran, store read outages, rate-limiter
waiters that are cancelled, and submissions whose answer was lost after the worker took
them: each must end in one terminal status without leaks or a second running copy.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from rollhub.client import AsyncRolloutClient
from rollhub.errors import StoreError, SubmissionError
from rollhub.rollout import RolloutConfig, RolloutRequest
from rollhub.stores.file import FileResultStore
from rollhub.submission.ratelimit import RateLimiter

pytestmark = pytest.mark.asyncio(loop_scope="module")


class OutageStore(FileResultStore):
    """A file store whose reads fail (as a store outage does) until ``down_until``."""

    down_until = 0.0

    def get(self, key: str):  # type: ignore[override]
        if time.monotonic() < self.down_until:
            raise StoreError(f"simulated outage reading {key}", url=self.url, key=key)
        return super().get(key)


def request(store: FileResultStore, sid: str, **payload: object) -> RolloutRequest:
    rollout = RolloutConfig(exp_id="edge", input_id="i", session_id=sid, result_store=store.url)
    return RolloutRequest(payload=payload, rollout=rollout)


def stored_statuses(store: FileResultStore, prefix: str) -> list[tuple[str, str]]:
    """(status, error type) of every document stored under ``prefix``."""
    out = []
    for key in store.list(prefix):
        meta = (store.get(key) or {}).get("_rollhub", {})
        err = meta.get("error") or {}
        out.append((str(meta.get("status")), str(err.get("type") if err else None)))
    return out


# Cancel before the driver ran --------------------------------------------------------------


async def test_cancel_before_first_step_frees_state(runtime, store) -> None:
    async with AsyncRolloutClient(runtime, store, exp_id="early", callbacks=False) as c:
        futs = [c.invoke({"x": i}) for i in range(50)]
        for f in futs:
            f.cancel()
        outs = [await f for f in futs]
        assert {o.status for o in outs} == {"cancelled"}
        await asyncio.sleep(0.05)
        assert c._watch.live == 0 and not c._watch._signals
        await asyncio.wait_for(futs[0].wait_submitted(), 2)
        # the session id of a cancelled rollout can be submitted again
        again = c.submit_request(c.request({"x": 1}, session_id=futs[1].session_id))
        assert (await again).status == "ok"


# Store read outages ------------------------------------------------------------------------


async def test_store_read_outage_shorter_than_deadline_keeps_ok(runtime, tmp_path: Path) -> None:
    store = OutageStore(tmp_path / "r", fsync=False)
    async with AsyncRolloutClient(
        runtime, store, exp_id="blip", callbacks=False, timeout_s=30
    ) as c:
        store.down_until = time.monotonic() + 4.0  # longer than 8 fast polls (~2.4 s)
        outs = [await f for f in [c.invoke({"x": i}) for i in range(6)]]
    assert [o.status for o in outs] == ["ok"] * 6


async def test_store_unreadable_past_deadline_is_store_error(runtime, tmp_path: Path) -> None:
    store = OutageStore(tmp_path / "r", fsync=False)
    async with AsyncRolloutClient(runtime, store, exp_id="down", callbacks=False) as c:
        store.down_until = time.monotonic() + 3600
        t0 = time.monotonic()
        outs = [await f for f in [c.invoke({"x": i}, timeout=3.0) for i in range(3)]]
        store.down_until = 0.0
    assert [o.status for o in outs] == ["store_error"] * 3
    assert outs[0].error is not None and "simulated outage" in outs[0].error.message
    assert time.monotonic() - t0 < 20


# Rate limiting -----------------------------------------------------------------------------


async def test_cancelled_limiter_waiters_give_their_tokens_back() -> None:
    lim = RateLimiter(25)
    waiters = [asyncio.ensure_future(lim.acquire()) for _ in range(300)]
    await asyncio.sleep(0.3)
    for w in waiters:
        w.cancel()
    await asyncio.gather(*waiters, return_exceptions=True)
    # ~32 calls went out in 0.3 s; the next one waits at most about one token's time
    assert lim._reserve() < 0.2


async def test_rollouts_still_queued_in_a_limiter_are_not_stopped(fresh_runtime, store) -> None:
    lim = RateLimiter(4, burst=1)
    passed: list[str] = []
    stopped: list[str] = []

    async def limited(req: RolloutRequest):
        await lim.acquire()
        passed.append(req.rollout.session_id)
        return await fresh_runtime.submit(req)

    real_cancel = fresh_runtime.cancel

    async def cancel(sid: str) -> None:
        stopped.append(sid)
        await real_cancel(sid)

    fresh_runtime.cancel = cancel  # type: ignore[method-assign]
    async with AsyncRolloutClient(fresh_runtime, store, exp_id="q", submit=limited) as c:
        futs = [c.invoke({"mode": "hang"}) for _ in range(12)]
        await asyncio.sleep(0.6)
        for f in futs:
            f.cancel()
        await c._watch.settle()
        assert {(await f).status for f in futs} == {"cancelled"}
    assert passed and set(stopped) <= set(passed), "a never-sent rollout got a stop call"
    assert set(passed) <= set(stopped), "a sent rollout was not stopped"


# Lost submission answers -------------------------------------------------------------------


async def test_lost_submit_answer_leaves_no_second_copy(make_runtime, tmp_path: Path) -> None:
    store = FileResultStore(tmp_path / "r", fsync=False)
    rt = make_runtime(workers=1)
    async with (
        rt,
        AsyncRolloutClient(rt, store, exp_id="lost", submit_attempts=1, session_attempts=2) as c,
    ):
        assert rt._http is not None
        real = rt._http.request
        lost: list[str] = []

        async def request_(method: str, port: int, path: str, **kw):
            answer = await real(method, port, path, **kw)
            if method == "POST" and not lost:
                lost.append(path)
                raise TimeoutError("the answer was lost")  # the worker did start it
            return answer

        rt._http.request = request_  # type: ignore[method-assign]
        out = await c.invoke({"mode": "sleep", "seconds": 1.5})
        assert out.status == "ok" and len(out.dead_sessions) == 1
        await c._watch.settle()
        await asyncio.sleep(2.0)  # a copy left running would finish ok by now
    statuses = stored_statuses(store, "lost/")
    assert sorted(statuses) == [("error", "CancelledError"), ("ok", "None")], statuses


async def test_delete_before_post_refuses_that_session(runtime, store) -> None:
    sid = "early-delete-" + "d" * 24
    assert runtime._http is not None
    for worker in runtime._workers:
        answer = await runtime._http.request("DELETE", worker.port, f"/rollouts/{sid}")
        assert answer.status_code == 404
    with pytest.raises(SubmissionError) as info:
        await runtime.submit(request(store, sid, mode="noop"))
    assert getattr(info.value, "status_code", None) == 409 and not info.value.transient
    assert "cancelled" in str(info.value)
    assert sum(runtime.load().values()) == 0
