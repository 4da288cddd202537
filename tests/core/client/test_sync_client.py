"""The synchronous twin: same methods, same order; unusable inside a running loop."""

from __future__ import annotations

import asyncio
import inspect
import time

import pytest
import rollhub
from rollhub.batch import assign_input_ids
from rollhub.client import AsyncRolloutClient, RolloutClient, RolloutFuture
from rollhub.errors import UsageError


def _public(cls: type) -> list[str]:
    return [
        n
        for n in cls.__dict__
        if not n.startswith("_") or n in ("__aenter__", "__aexit__", "__enter__", "__exit__")
    ]


def test_parity_of_public_methods() -> None:
    sync_names = _public(RolloutClient)
    mapped: list[str] = []
    for name in _public(AsyncRolloutClient):
        if name.endswith("_async"):
            base = name[: -len("_async")]
            if base in _public(AsyncRolloutClient):
                continue  # the await-acceptance variant exists only on the async client
            name = base
        name = {"__aenter__": "__enter__", "__aexit__": "__exit__"}.get(name, name)
        mapped.append(name)
    assert mapped == sync_names
    for name in sync_names:
        member = getattr(RolloutClient, name)
        if callable(member) and not name.startswith("__"):
            assert not inspect.iscoroutinefunction(member), name
            assert member.__doc__, f"RolloutClient.{name} has no docstring"


def test_lazy_exports() -> None:
    assert rollhub.RolloutClient is RolloutClient
    assert rollhub.AsyncRolloutClient is AsyncRolloutClient
    assert rollhub.RolloutFuture is RolloutFuture
    from rollhub.batch import BatchItem

    assert rollhub.BatchItem is BatchItem


def test_sync_client_end_to_end(tmp_path, make_runtime) -> None:
    with RolloutClient(
        make_runtime(workers=1), f"file://{tmp_path}", exp_id="sync", close_runtime=True
    ) as c:
        fut = c.invoke({"x": 3})
        outcome = fut.result(timeout=30)
        assert outcome.status == "ok" and outcome.result["x"] == 3
        assert fut.done()
        hang = c.invoke({"mode": "hang"})
        t0 = time.monotonic()
        assert hang.result(timeout=0.3).status == "timeout"
        assert time.monotonic() - t0 < 3
        stuck = c.invoke({"mode": "hang"})
        assert stuck.cancel() is True
        assert stuck.result().status == "cancelled"
        items = list(c.run_batch([{"x": i} for i in range(20)], max_concurrent=5, progress=False))
        assert sorted(i.index for i in items) == list(range(20))
        assert {i.status for i in items} == {"ok"}
        # break out of the sync iterator: the live ones are cancelled
        payloads = [{"x": 100}] + [{"mode": "hang", "n": 1}] * 5
        run = c.run_batch(payloads, max_concurrent=6, progress=False)
        first = next(run)
        run.close()
        assert first.index == 0
        store = c._async.store
        for input_id in assign_input_ids(payloads)[1:]:
            docs = [store.get(k) for k in store.list(f"sync/{input_id}/")]
            assert [d["_rollhub"]["error"]["type"] for d in docs] == ["CancelledError"]


async def test_sync_methods_inside_a_loop_raise_usage_error(tmp_path, make_runtime) -> None:
    with pytest.raises(UsageError, match="running event loop"):
        RolloutClient(make_runtime(), f"file://{tmp_path}", exp_id="x")


def test_future_result_inside_own_loop_raises(tmp_path, make_runtime) -> None:
    async def main() -> None:
        async with AsyncRolloutClient(
            make_runtime(workers=1), f"file://{tmp_path}", exp_id="x", close_runtime=True
        ) as c:
            fut = c.invoke({"x": 1})
            with pytest.raises(UsageError, match="running event loop"):
                fut.result()
            assert (await fut).status == "ok"

    asyncio.run(main())


def test_outcome_readable_after_close_and_errors_pickle(tmp_path, make_runtime) -> None:
    import pickle

    from rollhub.errors import SubmissionError

    with RolloutClient(
        make_runtime(workers=1), f"file://{tmp_path}", exp_id="after", close_runtime=True
    ) as c:
        fut = c.invoke({"x": 1})
        fut.result(timeout=30)
    assert fut.result().status == "ok"  # the client's loop is gone; the outcome stays
    assert fut.cancel() is False
    err = pickle.loads(
        pickle.dumps(
            SubmissionError(
                "throttled", transient=True, code="ThrottlingException", status_code=429
            )
        )
    )
    assert err.transient and err.code == "ThrottlingException" and err.status_code == 429
    outcome = pickle.loads(pickle.dumps(fut.result()))
    assert outcome == fut.result()
