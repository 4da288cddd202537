"""Completion notices to ``_rollout.callback_url``: delivered after the write, retried."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
from rollhub.app import RolloutApp
from rollhub.app.callback import send_notice

from tests.core.app.app_support import wait_for


def _app() -> RolloutApp:
    app = RolloutApp(callback_backoff_s=(0.05, 0.1, 0.2))

    @app.rollout_entrypoint
    def handler(payload: dict[str, Any]) -> dict[str, Any]:
        if payload.get("fail"):
            raise RuntimeError("agent failed")
        return {"rewards": 1.0}

    return app


def test_notice_is_delivered_after_the_store_write(
    serve: Callable, make_rollout: Callable, read_doc: Callable, receiver_factory: Callable
) -> None:
    receiver, url = receiver_factory()
    client = serve(_app())
    client.post("/invocations", json={"_rollout": make_rollout("cb-ok", callback_url=url)})
    client.post(
        "/invocations", json={"fail": True, "_rollout": make_rollout("cb-err", callback_url=url)}
    )
    wait_for(lambda: len(receiver.notices) == 2)
    by_sid = {n["session_id"]: n for n in receiver.notices}
    assert by_sid["cb-ok"] == {
        "session_id": "cb-ok",
        "exp_id": "exp1",
        "input_id": "q1",
        "result_key": "exp1/q1/cb-ok.json",
        "status": "ok",
    }
    assert by_sid["cb-err"]["status"] == "error"
    # the receiver can rely on the store: the document exists when the notice arrives
    assert read_doc("cb-ok") is not None and read_doc("cb-err") is not None


def test_notice_is_retried_on_server_errors(
    serve: Callable, make_rollout: Callable, read_doc: Callable, receiver_factory: Callable
) -> None:
    receiver, url = receiver_factory(fail_first=2)
    client = serve(_app())
    client.post("/invocations", json={"_rollout": make_rollout("cb-retry", callback_url=url)})
    wait_for(lambda: receiver.notices)
    assert len(receiver.attempts) == 3 and receiver.notices[0]["session_id"] == "cb-retry"
    gaps = [b[0] - a[0] for a, b in zip(receiver.attempts, receiver.attempts[1:], strict=False)]
    assert gaps[0] >= 0.04 and gaps[1] >= 0.09  # the backoff is honoured


def test_undeliverable_notice_is_logged_not_raised(
    serve: Callable, make_rollout: Callable, read_doc: Callable, receiver_factory: Callable
) -> None:
    receiver, url = receiver_factory(fail_first=100, fail_status=404)
    client = serve(_app())
    client.post("/invocations", json={"_rollout": make_rollout("cb-404", callback_url=url)})
    wait_for(lambda: read_doc("cb-404"))
    wait_for(lambda: receiver.attempts)
    assert len(receiver.attempts) == 1  # a 4xx rejection is final
    dead = "http://127.0.0.1:9/nobody-listens"
    client.post("/invocations", json={"_rollout": make_rollout("cb-dead", callback_url=dead)})
    assert wait_for(lambda: read_doc("cb-dead"))["rewards"] == 1.0


async def test_send_notice_gives_up_after_all_tries() -> None:
    async with httpx.AsyncClient() as client:
        t0 = asyncio.get_running_loop().time()
        ok = await send_notice(
            client, "http://127.0.0.1:9/x", {"session_id": "s"}, backoff_s=(0.05, 0.05)
        )
        assert ok is False
        assert asyncio.get_running_loop().time() - t0 >= 0.1
