"""AsyncRolloutClient and RolloutFuture against real worker processes."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from rollhub.client import AsyncRolloutClient, RolloutOutcome
from rollhub.episode import TERMINAL_STATUSES
from rollhub.errors import ConfigError, UsageError

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_invoke_ok_resolves_from_callback_with_one_store_read(
    client: AsyncRolloutClient,
) -> None:
    outcome = await client.invoke({"x": 7})
    assert isinstance(outcome, RolloutOutcome)
    assert outcome.status == "ok" and outcome.error is None
    assert outcome.result is not None and outcome.result["x"] == 7
    assert "_rollhub" not in outcome.result
    assert outcome.meta["status"] == "ok"
    assert outcome.elapsed is not None and outcome.elapsed > 0
    assert client.stats["callbacks"] == 1
    assert client.stats["store_reads"] == 1
    assert client.store.get(outcome.result_key) is not None


async def test_agent_exception_is_agent_error_not_success(client: AsyncRolloutClient) -> None:
    outcome = await client.invoke({"mode": "fail", "x": "boom"})
    assert outcome.status == "agent_error"
    assert outcome.error is not None and outcome.error.type == "ValueError"
    assert "boom" in outcome.error.message
    assert outcome.result == {}


async def test_timeout_ends_rollout_and_stops_the_session(
    client: AsyncRolloutClient, runtime
) -> None:
    fut = client.invoke({"mode": "hang"}, timeout=0.5)
    t0 = time.monotonic()
    outcome = await fut
    assert outcome.status == "timeout"
    assert outcome.error is not None and outcome.error.type == "RolloutTimeout"
    assert 0.4 < time.monotonic() - t0 < 3
    # The session's work stops: the app stores the cancel, past the deadline, as the
    # timeout the client reported, within a second.
    doc = await _wait_for_doc(client, outcome.result_key, 3.0)
    assert doc["_rollhub"]["error"]["type"] == "RolloutTimeout"
    assert "(CancelledError)" in doc["_rollhub"]["error"]["message"]
    await client._watch.settle()
    assert sum(runtime.load().values()) == 0


async def test_result_async_timeout_resolves_as_timeout(client: AsyncRolloutClient) -> None:
    fut = client.invoke({"mode": "hang"})
    outcome = await fut.result_async(timeout=0.3)
    assert outcome.status == "timeout"
    assert fut.done()
    assert (await fut).status == "timeout"  # resolved once, for good


async def test_cancel_stops_session_within_a_second(client: AsyncRolloutClient) -> None:
    fut = await client.invoke_async({"mode": "hang"})
    assert fut.receipt is not None and fut.receipt.runtime == "local"
    cancelled_at = time.time()
    assert fut.cancel() is True
    outcome = await fut
    assert outcome.status == "cancelled"
    doc = await _wait_for_doc(client, outcome.result_key, 3.0)
    assert doc["_rollhub"]["error"]["type"] == "CancelledError"
    # The handler itself stopped within a second (the store write may take longer on a
    # busy disk, so its time is not counted).
    assert doc["_rollhub"]["finished_at"] - cancelled_at < 1.0
    assert fut.cancel() is False


async def test_polling_completion_without_callbacks(runtime, store) -> None:
    async with AsyncRolloutClient(runtime, store, exp_id="poll", callbacks=False) as c:
        assert c.callback_url is None
        outcome = await c.invoke({"mode": "sleep", "seconds": 0.3})
        assert outcome.status == "ok"
        assert c.stats["callbacks"] == 0
        assert c.stats["store_reads"] > 1  # it had to poll


async def test_lost_notice_falls_back_to_store_poll(client: AsyncRolloutClient) -> None:
    # A callback URL nobody listens on: the notice is lost, the poll still finds the result.
    fut = client.invoke({"x": 1}, callback_url="http://127.0.0.1:9/nowhere")
    client._watch._poll = type(client._watch._poll)(initial=0.2, factor=2, maximum=1, jitter=0)
    outcome = await fut.result_async(timeout=10)
    assert outcome.status == "ok"
    assert client.stats["callbacks"] == 0


async def test_bad_override_names_the_field(client: AsyncRolloutClient) -> None:
    with pytest.raises(ConfigError, match=r"_rollout\.input_id"):
        client.invoke({"x": 1}, input_id="has/slash")
    with pytest.raises(ConfigError, match="sample_index"):
        client.invoke({"x": 1}, sample_index="not-a-number")


async def test_merge_order_required_defaults_overrides(runtime, store) -> None:
    async with AsyncRolloutClient(
        runtime, store, exp_id="merge", defaults={"model_id": "m-default", "sampling": {"t": 1}}
    ) as c:
        req = c.request({"id": "q1", "x": 1}, model_id="m-call")
        assert req.rollout.exp_id == "merge" and req.rollout.input_id == "q1"
        assert req.rollout.model_id == "m-call" and req.rollout.sampling == {"t": 1}
        assert req.rollout.result_store == store.url
        assert req.rollout.callback_url == c.callback_url
        assert len(req.rollout.session_id) >= 33


async def test_invoke_before_start_is_usage_error(runtime, store) -> None:
    c = AsyncRolloutClient(runtime, store, exp_id="x")
    with pytest.raises(UsageError, match="not started"):
        c.invoke({"x": 1})


async def test_close_cancels_live_rollouts(runtime, store) -> None:
    c = await AsyncRolloutClient(runtime, store, exp_id="close").start()
    futs = [c.invoke({"mode": "hang"}) for _ in range(3)]
    await asyncio.gather(*(f.wait_submitted() for f in futs))
    await c.close()
    assert [f._outcome.result().status for f in futs] == ["cancelled"] * 3
    for f in futs:
        assert (await _wait_for_doc(c, f.result_key, 4.0))["_rollhub"]["error"][
            "type"
        ] == "CancelledError"


async def test_every_status_is_terminal(client: AsyncRolloutClient) -> None:
    outs = await asyncio.gather(
        client.invoke({"x": 1}),
        client.invoke({"mode": "fail"}),
        client.invoke({"mode": "hang"}, timeout=0.2),
    )
    assert [o.status for o in outs] == ["ok", "agent_error", "timeout"]
    assert all(o.status in TERMINAL_STATUSES for o in outs)


async def _wait_for_doc(client: AsyncRolloutClient, key: str, within: float) -> dict:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        doc = client.store.get(key)
        if doc is not None:
            return doc
        await asyncio.sleep(0.02)
    raise AssertionError(f"no document at {key} within {within}s")


async def test_worker_answers_on_loopback_only(runtime) -> None:
    port = runtime._workers[0].port
    async with httpx.AsyncClient() as h:
        r = await h.get(f"http://127.0.0.1:{port}/ping")
    assert r.json()["status"] in ("Healthy", "HealthyBusy")


async def test_prepared_request_gets_the_callback_url(client: AsyncRolloutClient) -> None:
    from rollhub.rollout import RolloutConfig, RolloutRequest

    rollout = RolloutConfig(
        exp_id="exp1", input_id="g1", session_id="g1-0-abcdef", result_store=client.store.url
    )
    fut = await client.submit_request_async(RolloutRequest(payload={"x": 4}, rollout=rollout))
    assert fut.request.rollout.callback_url == client.callback_url
    outcome = await fut.result_async(timeout=1.5)  # well before the 2 s fallback poll
    assert outcome.status == "ok" and client.stats["callbacks"] >= 1
    other = RolloutConfig(
        exp_id="exp1", input_id="g1", session_id="g1-1-abcdef", result_store="file:///elsewhere"
    )
    with pytest.raises(UsageError, match=r"result_store=client\.store\.url"):
        client.submit_request(RolloutRequest(payload={}, rollout=other))
