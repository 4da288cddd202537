"""The cancel extension (DELETE /rollouts/{id}, GET /rollouts) and shutdown."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rollhub.app import RolloutApp
from rollhub.rollout import RESULT_META_KEY
from rollhub.testing.servers import serve_app

from tests.core.app.app_support import wait_for


def test_cancel_async_rollout_within_a_second(
    serve: Callable, make_rollout: Callable, read_doc: Callable
) -> None:
    app = RolloutApp()
    cleaned_up = threading.Event()

    @app.rollout_entrypoint
    async def slow(payload: dict[str, Any]) -> dict[str, Any]:
        try:
            await asyncio.sleep(60)
        finally:
            cleaned_up.set()
        return {"rewards": 1.0}

    client = serve(app)
    client.post("/invocations", json={"_rollout": make_rollout("slow-1")})
    client.post("/invocations", json={"_rollout": make_rollout("slow-2")})
    assert client.get("/rollouts").json()["running"] == ["slow-1", "slow-2"]
    time.sleep(0.1)
    t0 = time.monotonic()
    r = client.delete("/rollouts/slow-1")
    elapsed = time.monotonic() - t0
    assert r.status_code == 200 and elapsed < 1.0
    assert r.json()["status"] == "cancelled" and r.json()["result"].endswith("/slow-1.json")
    doc = read_doc("slow-1")  # stored before the DELETE answered
    meta = doc[RESULT_META_KEY]
    assert meta["status"] == "error" and meta["error"]["type"] == "CancelledError"
    assert "DELETE /rollouts/slow-1" in meta["error"]["message"]
    assert cleaned_up.wait(2)  # the handler's own task was cancelled too
    assert client.get("/rollouts").json()["running"] == ["slow-2"]
    assert client.get("/ping").json()["status"] == "HealthyBusy"
    assert client.delete("/rollouts/slow-1").status_code == 404
    assert client.delete("/rollouts/never-ran").status_code == 404
    client.delete("/rollouts/slow-2")
    assert client.get("/ping").json()["status"] == "Healthy"


def test_cancel_sync_rollout_drops_its_late_return(
    serve: Callable, make_rollout: Callable, read_doc: Callable, store_dir: Path
) -> None:
    app = RolloutApp()
    release, returned = threading.Event(), threading.Event()

    @app.rollout_entrypoint
    def blocking(payload: dict[str, Any]) -> dict[str, Any]:
        release.wait(10)
        returned.set()
        return {"rewards": 1.0}

    client = serve(app)
    client.post("/invocations", json={"_rollout": make_rollout("sync-1")})
    t0 = time.monotonic()
    assert client.delete("/rollouts/sync-1").json()["status"] == "cancelled"
    assert time.monotonic() - t0 < 1.0
    assert read_doc("sync-1")[RESULT_META_KEY]["error"]["type"] == "CancelledError"
    release.set()
    assert returned.wait(5)
    time.sleep(0.2)
    doc = read_doc("sync-1")  # still the cancellation: exactly one terminal result
    assert doc[RESULT_META_KEY]["status"] == "error" and "rewards" not in doc
    assert len(list(store_dir.rglob("*.json"))) == 1


def test_shutdown_stores_a_result_for_every_running_rollout(
    make_rollout: Callable, read_doc: Callable
) -> None:
    app = RolloutApp(shutdown_wait_s=5)

    @app.rollout_entrypoint
    async def forever(payload: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(60)
        return {}

    with serve_app(app) as base_url:
        import httpx

        with httpx.Client(base_url=base_url) as client:
            for i in range(3):
                client.post("/invocations", json={"_rollout": make_rollout(f"live-{i}")})
            wait_for(lambda: len(client.get("/rollouts").json()["running"]) == 3)
    for i in range(3):
        meta = read_doc(f"live-{i}")[RESULT_META_KEY]
        assert meta["error"]["type"] == "CancelledError"
        assert "shut down" in meta["error"]["message"]
