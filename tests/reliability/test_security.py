"""Nobody but the submitting client gets in: the security matrix of the agent app.

Against a worker the local runtime started (its secret is not ours) and against apps
served here with and without a secret.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from rollhub.app import RolloutApp
from rollhub.app.auth import sign_request
from rollhub.app.guard import RequestGuard
from rollhub.client import AsyncRolloutClient
from rollhub.testing.servers import serve_app
from starlette.requests import Request

from tests.reliability.local_pools import make_runtime

aio = pytest.mark.asyncio(loop_scope="function")
SECRET = "s3cret-for-tests"


def _rollout(tmp_path: Path, sid: str, **over: Any) -> dict[str, Any]:
    return {
        "exp_id": "sec",
        "input_id": "i",
        "session_id": sid,
        "result_store": f"file://{tmp_path / 'results'}",
        **over,
    }


def _app(**options: Any) -> RolloutApp:
    app = RolloutApp(**options)

    @app.rollout_entrypoint
    async def run(payload: dict[str, Any]) -> dict[str, Any]:
        import asyncio

        await asyncio.sleep(float(payload.get("seconds", 0)))
        return {"rewards": 1.0}

    return app


def _signed_post(client: httpx.Client, body: dict[str, Any], secret: str = SECRET, **kw: Any):
    data = json.dumps(body).encode()
    headers = {
        "content-type": "application/json",
        **sign_request(secret, "POST", "/invocations", data, **kw),
    }
    return client.post("/invocations", content=data, headers=headers)


@aio
async def test_local_workers_refuse_requests_not_signed_by_their_runtime(tmp_path, store) -> None:
    rt = make_runtime(workers=1)
    async with rt, AsyncRolloutClient(rt, store, exp_id="sec") as client:
        assert (await client.invoke({"x": 1}, timeout=20)).ok  # the runtime's own requests
        port = rt._workers[0].port
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as h:
            where = f"file://{tmp_path / 'intruder'}"
            body = {"x": 2, "_rollout": _rollout(tmp_path, "intruder-1", result_store=where)}
            r = await h.post("/invocations", json=body)
            assert r.status_code == 401 and "signed" in r.json()["error"]
            data = json.dumps(body).encode()
            forged = sign_request("wrong-secret", "POST", "/invocations", data)
            r = await h.post("/invocations", content=data, headers=forged)
            assert r.status_code == 401 and "does not match" in r.json()["error"]
            assert (await h.get("/rollouts")).status_code == 401
            assert (await h.delete("/rollouts/anything")).status_code == 401
            assert (await h.get("/ping")).status_code == 200  # liveness stays open
    assert not (tmp_path / "intruder").exists()


def test_signature_covers_body_path_and_time(tmp_path) -> None:
    with serve_app(_app(secret=SECRET)) as base, httpx.Client(base_url=base) as client:
        body = {"_rollout": _rollout(tmp_path, "ok-1")}
        assert _signed_post(client, body).json()["status"] == "processing"
        stale = _signed_post(
            client, {"_rollout": _rollout(tmp_path, "old-1")}, now=time.time() - 3600
        )
        assert stale.status_code == 401 and "clock" in stale.json()["error"]
        data = json.dumps({"_rollout": _rollout(tmp_path, "swap-1")}).encode()
        headers = sign_request(SECRET, "POST", "/invocations", data)
        tampered = data.replace(b"swap-1", b"swap-2")
        assert client.post("/invocations", content=tampered, headers=headers).status_code == 401
        listing = client.get("/rollouts", headers=sign_request(SECRET, "GET", "/rollouts"))
        assert listing.status_code == 200
        wrong_path = sign_request(SECRET, "DELETE", "/rollouts/other")
        assert client.delete("/rollouts/ok-1", headers=wrong_path).status_code == 401


def test_result_store_is_restricted(tmp_path) -> None:
    allowed = f"file://{tmp_path / 'results'}"
    app = _app(secret=SECRET, allowed_stores=[allowed])
    with serve_app(app) as base, httpx.Client(base_url=base) as client:
        escape = _rollout(tmp_path, "esc-1", result_store=f"{allowed}/../escape")
        r = _signed_post(client, {"_rollout": escape})
        assert r.status_code == 400 and r.json()["field"] == "_rollout.result_store"
        assert "'..'" in r.json()["error"]
        other = _rollout(tmp_path, "oth-1", result_store=f"file://{tmp_path / 'elsewhere'}")
        r = _signed_post(client, {"_rollout": other})
        assert r.status_code == 400 and "not a store this app writes to" in r.json()["error"]
        sub = _rollout(tmp_path, "sub-1", result_store=f"{allowed}/sub")
        assert _signed_post(client, {"_rollout": sub}).status_code == 200
    assert not (tmp_path / "escape").exists() and not (tmp_path / "elsewhere").exists()


def test_dotdot_store_is_refused_even_without_allowed_stores(tmp_path) -> None:
    with serve_app(_app()) as base, httpx.Client(base_url=base) as client:
        bad = _rollout(tmp_path, "dd-1", result_store=f"file://{tmp_path}/results/%2E%2E/x")
        r = client.post("/invocations", json={"_rollout": bad})
        assert r.status_code == 400 and "'..'" in r.json()["error"]


def test_callback_only_to_the_submitting_client(tmp_path) -> None:
    with serve_app(_app()) as base, httpx.Client(base_url=base) as client:
        away = _rollout(tmp_path, "cb-1", callback_url="http://203.0.113.7:8080/steal")
        r = client.post("/invocations", json={"_rollout": away})
        assert r.status_code == 400 and r.json()["field"] == "_rollout.callback_url"
        home = _rollout(tmp_path, "cb-2", callback_url="http://127.0.0.1:9/rollhub/callback/t0k3n")
        assert client.post("/invocations", json={"_rollout": home}).status_code == 200
        for _ in range(200):
            doc = tmp_path / "results" / "sec" / "i" / "cb-2.json"
            if doc.exists():
                break
            time.sleep(0.02)
        text = doc.read_text()
    assert "t0k3n" not in text and "callback_url" not in text


def _request(host: str, method: str = "GET", path: str = "/rollouts") -> Request:
    scope = {
        "type": "http", "method": method, "path": path, "headers": [], "query_string": b"",
        "client": (host, 40000), "server": ("127.0.0.1", 8080), "scheme": "http",
    }  # fmt: skip
    return Request(scope)


def test_listing_and_cancelling_without_a_secret_only_for_loopback() -> None:
    guard = RequestGuard(secret=None, allowed_stores=None)
    assert guard.check_control(_request("127.0.0.1")) is None
    assert guard.check_control(_request("::1", "DELETE", "/rollouts/x")) is None
    refused = guard.check_control(_request("10.1.2.3"))
    assert refused is not None and refused.status_code == 403
    refused = guard.check_control(_request("10.1.2.3", "DELETE", "/rollouts/x"))
    assert refused is not None and refused.status_code == 403
