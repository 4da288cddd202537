"""RolloutApp keeps the AgentCore app's HTTP contract: same requests, same answers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from bedrock_agentcore.runtime import BedrockAgentCoreApp
from rollhub.app import RolloutApp
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse

SESSION = "X-Amzn-Bedrock-AgentCore-Runtime-Session-Id"


def _install(app: Any, kind: str) -> None:
    """The same user code on either app."""
    if kind == "sync":

        @app.entrypoint
        def handler(payload: dict[str, Any], context: Any) -> Any:
            return _behaviour(payload, context)

    elif kind == "async":

        @app.entrypoint
        async def handler(payload: dict[str, Any], context: Any) -> Any:
            await asyncio.sleep(0)
            return _behaviour(payload, context)

    elif kind == "stream":

        @app.entrypoint
        def handler(payload: dict[str, Any]) -> Any:
            for i in range(payload.get("n", 3)):
                yield {"chunk": i, "text": "é"}


def _behaviour(payload: dict[str, Any], context: Any) -> Any:
    action = payload.get("action")
    if action == "raise":
        raise RuntimeError("handler failed")
    if action == "http":
        raise HTTPException(status_code=418, detail="teapot")
    if action == "response":
        return JSONResponse({"custom": True}, status_code=404)
    if action == "string":
        return "plain text ü"
    return {"echo": payload, "session": context.session_id}


REQUESTS: list[tuple[str, str, dict[str, Any]]] = [
    ("GET", "/ping", {}),
    ("POST", "/invocations", {"json": {"prompt": "hi ü", "n": [1, 2]}}),
    ("POST", "/invocations", {"json": {"x": 1}, "headers": {SESSION: "sess-123"}}),
    ("POST", "/invocations", {"json": {"action": "raise"}}),
    ("POST", "/invocations", {"json": {"action": "http"}}),
    ("POST", "/invocations", {"json": {"action": "response"}}),
    ("POST", "/invocations", {"json": {"action": "string"}}),
    (
        "POST",
        "/invocations",
        {"content": b"{broken", "headers": {"content-type": "application/json"}},
    ),
    (
        "POST",
        "/invocations",
        {"content": b"\xff\xfe", "headers": {"content-type": "application/json"}},
    ),
    ("GET", "/invocations", {}),
    ("POST", "/ping", {}),
    ("GET", "/no-such-path", {}),
]


def _shape(response: Any) -> tuple[int, Any]:
    try:
        body = response.json()
    except ValueError:
        return response.status_code, response.text
    if isinstance(body, dict):
        if "time_of_last_update" in body:
            assert isinstance(body["time_of_last_update"], int)
            body = {**body, "time_of_last_update": "<int>"}
        if "session" in body and body["session"] is not None and body["session"] != "sess-123":
            body = {**body, "session": "<generated>"}
        if body.get("error") in ("Invalid JSON", "Invalid encoding"):
            body = {"error": body["error"], "details": "<message>"}
    return response.status_code, body


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_same_answers_as_agentcore(serve: Callable, kind: str) -> None:
    reference, ours = BedrockAgentCoreApp(), RolloutApp()
    _install(reference, kind)
    _install(ours, kind)
    ref_client, our_client = serve(reference), serve(ours)
    for method, path, kwargs in REQUESTS:
        expected = _shape(ref_client.request(method, path, **kwargs))
        got = _shape(our_client.request(method, path, **kwargs))
        if path == "/invocations" and method == "POST" and "session" in str(expected[1]):
            # AgentCore passes None without a session header; we make up a UUID.
            expected = (expected[0], {**expected[1], "session": got[1]["session"]})
        assert got == expected, (method, path, kwargs)


def test_streaming_and_missing_entrypoint_match(serve: Callable) -> None:
    reference, ours = BedrockAgentCoreApp(), RolloutApp()
    _install(reference, "stream")
    _install(ours, "stream")
    ref_client, our_client = serve(reference), serve(ours)
    ref = ref_client.post("/invocations", json={"n": 4})
    got = our_client.post("/invocations", json={"n": 4})
    assert got.status_code == ref.status_code == 200
    assert got.headers["content-type"].startswith("text/event-stream")
    assert got.text == ref.text
    empty_ref, empty_ours = serve(BedrockAgentCoreApp()), serve(RolloutApp())
    assert _shape(empty_ours.post("/invocations", json={})) == _shape(
        empty_ref.post("/invocations", json={})
    )


def test_ping_busy_while_async_task_registered(serve: Callable) -> None:
    for app in (BedrockAgentCoreApp(), RolloutApp()):
        client = serve(app)
        assert client.get("/ping").json()["status"] == "Healthy"
        task_id = app.add_async_task("work")
        busy = client.get("/ping").json()
        assert busy["status"] == "HealthyBusy" and isinstance(busy["time_of_last_update"], int)
        assert app.complete_async_task(task_id) is True
        assert client.get("/ping").json()["status"] == "Healthy"
        assert app.complete_async_task(task_id) is False

        app.force_ping_status(type(app.get_current_ping_status())("HealthyBusy"))
        assert client.get("/ping").json()["status"] == "HealthyBusy"
        app.clear_forced_ping_status()
        assert client.get("/ping").json()["status"] == "Healthy"


def test_custom_ping_handler(serve: Callable) -> None:
    for app in (BedrockAgentCoreApp(), RolloutApp()):
        app.ping(lambda: "HealthyBusy")
        assert serve(app).get("/ping").json()["status"] == "HealthyBusy"


def test_run_signature_matches() -> None:
    import inspect

    ref = inspect.signature(BedrockAgentCoreApp.run)
    ours = inspect.signature(RolloutApp.run)
    assert list(ref.parameters)[:3] == list(ours.parameters)[:3] == ["self", "port", "host"]
    assert ours.parameters["port"].default == ref.parameters["port"].default == 8080
