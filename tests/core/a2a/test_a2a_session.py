"""The A2A halves on loopback: a rollhub agent served with a2a-sdk, driven by rollhub's client."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from rollhub.a2a.client import A2ATaskClient, build_a2a_client, is_transient
from rollhub.a2a.server import a2a_app
from rollhub.a2a.wire import part_data, task_message
from rollhub.errors import SessionError
from rollhub.testing.servers import serve_app

from tests.core.a2a.agents import math_app


@pytest.fixture
def served(tmp_path):
    app = math_app(tmp_path)
    with serve_app(a2a_app(app)) as url:
        yield app, url


async def test_setup_then_run_returns_the_artifact_and_numbers_keep_their_type(served):
    _, url = served
    task = {"a": 2, "b": 3, "answer": 5, "big": 2**60 + 1, "ratio": 0.5}
    async with httpx.AsyncClient() as http:
        client = A2ATaskClient(build_a2a_client(http, url + "/"), "session-1")
        parked = await client.setup(task)
        assert parked.status.state == 6  # TASK_STATE_INPUT_REQUIRED
        dump = await client.run(task)
    assert dump.ok and dump.reward == 1.0 and dump.metrics == {"turns": 1.0}
    assert dump.result["prepared"] == "workspace for 2+3"
    # exact end to end: ints stay ints, 2**60 + 1 keeps every digit
    assert dump.result["types"] == {"a": "int", "b": "int", "answer": "int", "big": "int",
                                    "ratio": "float"}  # fmt: skip
    assert dump.result["big"] == 2**60 + 1 and dump.result["sum"] == 5


def test_the_struct_copy_alone_would_turn_integers_into_floats():
    message = task_message({"n": 7, "big": 2**60 + 1}, message_id="m")
    struct = part_data(message.parts[0])["task_input"]
    assert struct["n"] == 7.0 and isinstance(struct["n"], float)
    assert struct["big"] != 2**60 + 1  # a double cannot hold it


async def test_a_nan_reward_is_refused_with_a_clear_error(served):
    _, url = served
    task = {"a": 1, "b": 1, "answer": 2, "reward_nan": True}
    async with httpx.AsyncClient() as http:
        client = A2ATaskClient(build_a2a_client(http, url + "/"), "session-nan")
        await client.setup(task)
        dump = await client.run(task)
    assert not dump.ok and dump.reward is None
    assert dump.error.type == "InvalidResultError"
    assert "rewards=nan is not finite" in dump.error.message


async def test_a_failed_setup_raises_with_the_agents_reason(served):
    _, url = served
    async with httpx.AsyncClient() as http:
        client = A2ATaskClient(build_a2a_client(http, url + "/"), "session-f")
        with pytest.raises(SessionError) as info:
            await client.setup({"a": 1, "b": 1, "answer": 2, "fail_setup": "no disk"})
    assert info.value.phase == "setup" and not info.value.transient
    assert "TASK_STATE_FAILED" in str(info.value) and "cannot prepare: no disk" in str(info.value)


async def test_cancel_stops_the_work_and_ping_goes_idle(served, tmp_path):
    app, url = served
    task = {"a": 1, "b": 1, "answer": 2, "sleep": 30}
    async with httpx.AsyncClient() as http:
        client = A2ATaskClient(build_a2a_client(http, url + "/"), "session-c")
        await client.setup(task)
        running = asyncio.ensure_future(client.run(task))
        deadline = time.monotonic() + 10
        while (await http.get(f"{url}/ping")).json()["status"] != "HealthyBusy":
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        await client.cancel()
        ping = (await http.get(f"{url}/ping")).json()["status"]
        dump = await asyncio.wait_for(running, 10)
    assert ping == "Healthy"
    assert app.state.cancelled  # the handler saw the cancellation where it awaited
    assert not dump.ok and "CANCELED" in dump.error.message
    assert not list(tmp_path.glob("*.done"))  # it never ran to the end


async def test_a_server_that_never_answers_is_a_transient_session_error():
    async with httpx.AsyncClient() as http:
        client = A2ATaskClient(
            build_a2a_client(http, "http://127.0.0.1:9/"), "session-x", transient_budget_s=0.3
        )
        with pytest.raises(SessionError) as info:
            await client.setup({"a": 1})
    assert info.value.transient and client.retried >= 1


def test_transient_errors_are_told_apart():
    request = httpx.Request("POST", "http://x/")
    status = lambda code: httpx.HTTPStatusError("e", request=request, response=httpx.Response(code))  # noqa: E731
    assert is_transient(httpx.ConnectError("refused"))
    assert is_transient(status(503)) and is_transient(status(429))
    assert not is_transient(status(400)) and not is_transient(ValueError("bad"))
    wrapped = RuntimeError("JSON-RPC Error -32053: throttled")
    assert is_transient(wrapped)
