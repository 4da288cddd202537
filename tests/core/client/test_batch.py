"""Batch runs on real worker processes: exactly one item per payload, whatever happens."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter

import pytest
from rollhub.batch import BatchItem, assign_input_ids
from rollhub.client import AsyncRolloutClient
from rollhub.errors import ConfigError, SubmissionError
from rollhub.rollout import content_input_id

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def collect(agen) -> list[BatchItem]:
    return [item async for item in agen]


async def test_500_noop_rollouts_each_yielded_once(client: AsyncRolloutClient) -> None:
    payloads = [{"id": f"q{i}", "x": i} for i in range(500)]
    items = await collect(client.run_batch_async(payloads, max_concurrent=64, progress=False))
    assert len(items) == 500
    assert sorted(i.index for i in items) == list(range(500))
    assert Counter(i.status for i in items) == {"ok": 500}
    assert all(i.result["x"] == i.index and i.input_id == f"q{i.index}" for i in items)
    assert len({i.session_id for i in items}) == 500
    # The callback path: one store read per rollout; a notice later than the sparse
    # fallback poll (2 s) on a loaded machine may add one more for a few.
    assert 500 <= client.stats["store_reads"] <= 525


async def test_stored_error_is_agent_error_never_success(client: AsyncRolloutClient) -> None:
    payloads = [{"mode": "fail", "x": 1}, {"x": 2}]
    items = {i.index: i for i in await collect(client.run_batch_async(payloads, progress=False))}
    assert items[0].status == "agent_error" and not items[0].ok
    assert items[0].error.type == "ValueError" and "agent failed" in items[0].error.message
    assert items[1].status == "ok"


async def test_break_cancels_live_sessions_and_pending_submissions(
    client: AsyncRolloutClient, runtime
) -> None:
    payloads = [{"x": 0}] + [{"mode": "hang", "x": i} for i in range(1, 40)]
    agen = client.run_batch_async(payloads, max_concurrent=8, progress=False)
    async for item in agen:
        assert item.index == 0
        break
    await agen.aclose()
    # Only max_concurrent were ever submitted; each live one was stopped on its worker.
    assert client.stats["submitted"] <= 9
    deadline = time.monotonic() + 2
    while sum(runtime.load().values()) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert sum(runtime.load().values()) == 0
    stored = client.store.list("exp1/")
    cancelled = [k for k in stored if client.store.get(k)["_rollhub"]["status"] == "error"]
    assert len(cancelled) == client.stats["submitted"] - 1


async def test_timeout_per_rollout_in_batch(client: AsyncRolloutClient) -> None:
    items = await collect(
        client.run_batch_async([{"mode": "hang"}, {"x": 1}], timeout=0.4, progress=False)
    )
    assert sorted(i.status for i in items) == ["ok", "timeout"]


async def test_resume_skips_stored_inputs(client: AsyncRolloutClient) -> None:
    payloads = [{"id": f"r{i}", "x": i} for i in range(10)] + [{"id": "bad", "mode": "fail"}]
    first = await collect(client.run_batch_async(payloads, progress=False))
    assert not any(i.resumed for i in first)
    # Lose three results: a rerun runs those three and the failed one, nothing else.
    for item in first[:3]:
        if item.ok:
            client.store.delete(f"exp1/{item.input_id}/{item.session_id}.json")
    lost = {i.input_id for i in first[:3] if i.ok}
    before = client.stats["submitted"]
    second = await collect(client.run_batch_async(payloads, progress=False))
    assert len(second) == 11 and sorted(i.index for i in second) == list(range(11))
    rerun = {i.input_id for i in second if not i.resumed}
    assert rerun == lost | {"bad"}
    assert client.stats["submitted"] - before == len(rerun)
    resumed = [i for i in second if i.resumed]
    assert all(i.ok and i.result["x"] == int(i.input_id[1:]) for i in resumed)
    # rerun_failed=False keeps the stored error as a resumed agent_error.
    third = await collect(client.run_batch_async(payloads, rerun_failed=False, progress=False))
    assert all(i.resumed for i in third)
    assert [i.status for i in third if i.input_id == "bad"] == ["agent_error"]


async def test_transient_submit_errors_are_retried(runtime, store) -> None:
    calls = Counter()

    async def flaky(request):
        calls[request.rollout.session_id] += 1
        if calls[request.rollout.session_id] <= 2:
            raise SubmissionError("throttled", transient=True)
        return await runtime.submit(request)

    async with AsyncRolloutClient(runtime, store, exp_id="retry", submit=flaky) as c:
        c._watch._submit_backoff = type(c._watch._submit_backoff)(initial=0.01, maximum=0.05)
        items = await collect(c.run_batch_async([{"x": i} for i in range(5)], progress=False))
    assert [i.status for i in items] == ["ok"] * 5
    assert all(n == 3 for n in calls.values())
    assert all(i.outcome.attempts == 3 for i in items)


async def test_permanent_submit_errors_are_not_retried(runtime, store, caplog) -> None:
    calls = Counter()

    async def refuse(request):
        calls[request.rollout.session_id] += 1
        raise SubmissionError("validation failed: bad payload", transient=False)

    async with AsyncRolloutClient(runtime, store, exp_id="perm", submit=refuse) as c:
        items = await collect(c.run_batch_async([{"x": i} for i in range(3)], progress=False))
    assert [i.status for i in items] == ["submit_error"] * 3
    assert items[0].error.type == "SubmissionError" and "validation" in items[0].error.message
    assert set(calls.values()) == {1}
    # each final submit failure is logged with its cause, not only counted
    failed = [r for r in caplog.records if "failed after 1 attempt" in r.getMessage()]
    assert len(failed) == 3 and all(r.levelname == "WARNING" for r in failed)
    assert "bad payload" in failed[0].getMessage()


async def test_exhausted_retries_end_as_infra_error(runtime, store) -> None:
    async def refused(request):
        raise ConnectionRefusedError("connection refused")

    # no worker takes it: 3 tries in the first session, 3 more in a second, then given up,
    # as an infrastructure failure (the runtime refusing the payload is submit_error)
    async with AsyncRolloutClient(
        runtime, store, exp_id="exh", submit=refused, submit_attempts=3
    ) as c:
        c._watch._submit_backoff = type(c._watch._submit_backoff)(initial=0.01, maximum=0.02)
        items = await collect(c.run_batch_async([{"x": 1}], progress=False))
    item = items[0]
    assert item.status == "infra_error" and item.outcome.attempts == 6
    assert item.error.type == "ConnectionRefusedError"
    (dead,) = item.outcome.dead_sessions
    assert item.session_id == dead["session_id"] + "-r1" and "refused" in dead["cause"]
    async with AsyncRolloutClient(
        runtime, store, exp_id="exh1", submit=refused, submit_attempts=3, session_attempts=1
    ) as c:
        c._watch._submit_backoff = type(c._watch._submit_backoff)(initial=0.01, maximum=0.02)
        items = await collect(c.run_batch_async([{"x": 1}], progress=False))
    assert items[0].status == "infra_error" and items[0].outcome.attempts == 3
    assert items[0].outcome.dead_sessions == ()


async def test_a_new_session_whose_capture_cannot_open_is_lost_too(runtime, store) -> None:
    """The hub's capture session for a rollout's next session cannot be opened (no gateway
    replica takes one while a node goes): that session is lost as well, the next one is
    tried, and the rollout ends infra_error, never agent_error."""
    from rollhub.errors import GatewayError

    async def refused(request):
        raise ConnectionRefusedError("connection refused")

    opened = []

    async def on_new(old, new):
        opened.append(new.rollout.session_id)
        if len(opened) == 1:
            raise GatewayError("no gateway replica can take a session")

    async with AsyncRolloutClient(
        runtime, store, exp_id="cap", submit=refused, submit_attempts=1, session_attempts=3,
        on_new_session=on_new,
    ) as c:  # fmt: skip
        items = await collect(c.run_batch_async([{"x": 1}], progress=False))
    (item,) = items
    assert item.status == "infra_error", item.error
    first, second = item.outcome.dead_sessions
    assert "refused" in first["cause"] and second["session_id"] == first["session_id"] + "-r1"
    assert "no capture session could be opened" in second["cause"] and "GatewayError" in second["cause"]
    assert opened == [first["session_id"] + "-r1", first["session_id"] + "-r2"]
    assert item.session_id == first["session_id"] + "-r2"


async def test_session_attempts_must_be_positive(runtime, store) -> None:
    with pytest.raises(ConfigError, match="session_attempts=0"):
        AsyncRolloutClient(runtime, store, exp_id="x", session_attempts=0)


async def test_kill_9_worker_mid_rollout(fresh_runtime, store) -> None:
    rt = fresh_runtime
    async with AsyncRolloutClient(rt, store, exp_id="kill") as c:
        payloads = [{"mode": "sleep", "seconds": 2.0, "x": i} for i in range(6)] + [{"x": 99}]
        agen = c.run_batch_async(payloads, max_concurrent=16, progress=False)
        first = await agen.__anext__()  # the quick one
        assert first.index == 6 and first.ok
        victim = rt._workers[0]
        doomed = set(victim.sessions)
        assert doomed, "the least-loaded router put sessions on every worker"
        t0 = time.monotonic()
        os.kill(victim.proc.pid, signal.SIGKILL)
        items = [first] + [i async for i in agen]
        elapsed = time.monotonic() - t0
    assert sorted(i.index for i in items) == list(range(7))
    # the killed worker's rollouts ran again under new sessions and ended ok
    assert all(i.ok for i in items), [(i.status, i.error) for i in items]
    by_dead = {d["session_id"]: i for i in items for d in i.outcome.dead_sessions}
    assert set(by_dead) == doomed
    for sid, item in by_dead.items():
        assert item.session_id == f"{sid}-r1"
        (dead,) = item.outcome.dead_sessions
        assert "exited with code -9" in dead["cause"]
    assert elapsed < 5  # the loss is seen at once: one more 2 s sleep, not a timeout
    assert rt.workers_started == 3  # the dead worker was replaced
    assert victim.proc.pid not in rt.worker_pids()


async def test_input_ids_are_deterministic_and_unique() -> None:
    payloads = [{"id": "a"}, {"id": "a"}, {"q": 1}, {"q": 1}, {"id": "has space"}]
    ids = assign_input_ids(payloads)
    assert ids == assign_input_ids(payloads)
    assert ids[:2] == ["a", "a.1"]
    assert ids[2] == content_input_id({"q": 1}) and ids[3] == ids[2] + ".1"
    assert ids[4].startswith("h-")
    with pytest.raises(ConfigError, match="input_ids has 1 ids for 5"):
        assign_input_ids(payloads, input_ids=["x"])


async def test_bad_max_concurrent(client: AsyncRolloutClient) -> None:
    with pytest.raises(ConfigError, match="max_concurrent"):
        await collect(client.run_batch_async([{"x": 1}], max_concurrent=0))


async def test_plain_break_cancels_when_the_generator_is_dropped(
    client: AsyncRolloutClient, runtime
) -> None:
    payloads = [{"x": "first"}] + [{"mode": "hang", "x": f"b{i}"} for i in range(6)]
    async for item in client.run_batch_async(payloads, max_concurrent=7, progress=False):
        assert item.index == 0
        break
    # The dropped generator is closed by the loop's async-generator finalizer.
    deadline = time.monotonic() + 3
    while (client._watch.live or sum(runtime.load().values())) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert client._watch.live == 0
    assert sum(runtime.load().values()) == 0


async def test_lost_session_whose_result_is_stored_is_kept(
    client: AsyncRolloutClient, runtime
) -> None:
    from rollhub.results.document import build_result_document

    fut = await client.invoke_async({"mode": "hang"})
    doc = build_result_document(
        rollout=fut.request.rollout, payload=fut.request.payload, started_at=1.0, finished_at=2.0,
        result={"rewards": 0.5},
    )  # fmt: skip
    client.store.put(fut.result_key, doc)  # written just before its worker "died"
    runtime._report_lost(fut.session_id, "worker exited")
    outcome = await fut.result_async(timeout=5)
    assert outcome.status == "ok" and outcome.result == {"rewards": 0.5}
    await runtime.cancel(fut.session_id)


async def test_a_loss_reported_for_a_failed_attempt_does_not_end_the_retry(tmp_path) -> None:
    # The worker died while the first POST was in flight: the runtime reports the session
    # lost and the POST fails as transient. The retry runs on a healthy worker and must be
    # the one whose outcome counts.
    from rollhub.results.document import build_result_document
    from rollhub.rollout import SubmitReceipt
    from rollhub.runtime import Runtime
    from rollhub.stores.file import FileResultStore

    store = FileResultStore.from_url(f"file://{tmp_path}")

    class DiesOnce(Runtime):
        name = "dies-once"

        def __init__(self) -> None:
            super().__init__()
            self.calls = 0
            self.tasks: set[asyncio.Task] = set()

        async def submit(self, request):
            self.calls += 1
            sid = request.rollout.session_id
            if self.calls == 1:
                self._report_lost(sid, "worker exited")
                raise SubmissionError("connection reset", transient=True)

            async def finish_later() -> None:
                await asyncio.sleep(0.2)
                store.put(
                    request.rollout.result_key,
                    build_result_document(
                        rollout=request.rollout,
                        payload=request.payload,
                        started_at=1.0,
                        finished_at=2.0,
                        result={"rewards": 1.0},
                    ),
                )

            task = asyncio.get_running_loop().create_task(finish_later())
            self.tasks.add(task)
            return SubmitReceipt(session_id=sid, result_location="", runtime=self.name)

        async def cancel(self, session_id):
            return None

    runtime = DiesOnce()
    async with AsyncRolloutClient(
        runtime, store, exp_id="race", callbacks=False, poll_initial_s=0.05
    ) as c:
        c._watch._submit_backoff = type(c._watch._submit_backoff)(initial=0.01, maximum=0.02)
        out = await c.invoke({"x": 1}).result_async(timeout=5)
    assert out.status == "ok" and out.attempts == 2 and out.result == {"rewards": 1.0}


async def test_per_rollout_fields_cannot_be_batch_overrides(client: AsyncRolloutClient) -> None:
    with pytest.raises(ConfigError, match="session_id cannot be shared by every rollout"):
        await collect(client.run_batch_async([{"x": 1}, {"x": 2}], session_id="s", progress=False))
    assert client.stats["submitted"] == 0
