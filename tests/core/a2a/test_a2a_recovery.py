"""A2A sessions across a lost server and lost answers: a restarted agent server, a setup
message whose answer a proxy dropped, and tasks left behind in a session's context."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest
from a2a.types import ListTasksRequest, SendMessageConfiguration, SendMessageRequest, TaskState
from rollhub.a2a.client import A2ATaskClient, build_a2a_client
from rollhub.a2a.server import a2a_app
from rollhub.a2a.wire import task_message
from rollhub.app import RolloutApp
from rollhub.errors import SessionError
from rollhub.rollout import build_request
from rollhub.runtimes.a2a import A2ARuntime
from rollhub.sessions.bounds import PrioritySlots, SessionBounds
from rollhub.sessions.lifecycle import run_with_attempts
from rollhub.testing.servers import serve_app
from starlette.types import ASGIApp, Receive, Scope, Send

from tests.core.a2a.agents import math_app

TASK = {"a": 1, "b": 2, "answer": 3}


class Swappable:
    """An ASGI front whose app can be replaced: a new app is a restarted server (its
    in-memory tasks gone); ``drop_next_answer`` forwards the next POST but answers 502,
    as a proxy that lost the server's answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.drop_next_answer = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or not self.drop_next_answer:
            return await self.app(scope, receive, send)
        self.drop_next_answer = False

        async def swallow(message: object) -> None:
            pass

        await self.app(scope, receive, swallow)
        await send({"type": "http.response.start", "status": 502, "headers": []})
        await send({"type": "http.response.body", "body": b"bad gateway"})


def _request(payload: dict[str, object], tmp_path) -> object:
    return build_request(payload, exp_id="e", store_url=f"file://{tmp_path / 's'}", defaults={},
                         overrides={}, callback_url=None)  # fmt: skip


async def _restart_after(front: Swappable, delay_s: float) -> None:
    await asyncio.sleep(delay_s)
    front.app = a2a_app(math_app())


@pytest.mark.parametrize(("attempts", "status", "dead"), [(2, "ok", 1), (1, "infra_error", 0)])
async def test_a_server_restart_mid_run_is_retried_on_a_new_session(tmp_path, attempts, status,
                                                                     dead):  # fmt: skip
    front = Swappable(a2a_app(math_app()))
    with serve_app(front, lifespan="off") as url:
        runtime = A2ARuntime(target="url", url=url + "/", poll_max_s=0.1)
        bounds = SessionBounds(PrioritySlots(4), PrioritySlots(4), 30, 30, 10)
        restart = asyncio.ensure_future(_restart_after(front, 0.6))
        outcome, _ = await run_with_attempts(
            runtime.open_session, _request({**TASK, "sleep": 1.0}, tmp_path), bounds,
            attempts=attempts,
        )  # fmt: skip
        await restart
    # the lost task is the infrastructure's failure, never the agent's
    assert outcome.status == status and len(outcome.dead_sessions) == dead
    if dead:
        assert "lost task" in outcome.dead_sessions[0]["cause"]
    else:
        assert outcome.transient and "lost task" in outcome.error.message


async def test_a_restart_while_parked_is_a_transient_error_of_the_run():
    front = Swappable(a2a_app(math_app()))
    with serve_app(front, lifespan="off") as url:
        async with httpx.AsyncClient() as http:
            client = A2ATaskClient(build_a2a_client(http, url + "/"), "s-restart")
            await client.setup(TASK)
            front.app = a2a_app(math_app())
            with pytest.raises(SessionError) as info:
                await client.run(TASK)
    assert info.value.transient and info.value.phase == "run"
    assert f"lost task {client.task_id}" in str(info.value)


def _counting_setup_app() -> tuple[RolloutApp, list[str]]:
    app = RolloutApp()
    setups: list[str] = []

    @app.rollout_setup
    async def setup(payload, context):
        setups.append(context.session_id)

    @app.rollout_entrypoint
    async def run(payload, context):
        return {"rewards": 1.0}

    return app, setups


async def _session_tasks(client: A2ATaskClient, session_id: str) -> list[object]:
    page = await client._client.list_tasks(ListTasksRequest(context_id=session_id))
    return list(page.tasks)


async def test_a_setup_whose_answer_was_lost_is_not_sent_again():
    app, setups = _counting_setup_app()
    front = Swappable(a2a_app(app))
    front.drop_next_answer = True
    with serve_app(front, lifespan="off") as url:
        async with httpx.AsyncClient() as http:
            client = A2ATaskClient(build_a2a_client(http, url + "/"), "s-lost", poll_max_s=0.05)
            await client.setup(TASK)
            dump = await client.run(TASK)
            tasks = await _session_tasks(client, "s-lost")
    assert dump.ok and client.retried >= 1
    assert setups == ["s-lost"]  # the setup ran once: the client found the task it created
    assert [t.status.state for t in tasks] == [TaskState.TASK_STATE_COMPLETED]


async def test_cancel_cancels_every_task_of_the_session():
    app, _ = _counting_setup_app()
    with serve_app(a2a_app(app)) as url:
        async with httpx.AsyncClient() as http:
            client = A2ATaskClient(build_a2a_client(http, url + "/"), "s-many", poll_max_s=0.05)
            # a stray task in the session's context, as a resent setup leaves behind
            stray = SendMessageRequest(
                message=task_message(TASK, message_id=uuid.uuid4().hex, context_id="s-many"),
                configuration=SendMessageConfiguration(return_immediately=True),
            )
            async for _ in client._client.send_message(stray):
                pass
            await client.setup(TASK)
            for _ in range(100):  # the stray parks too
                states = {t.status.state for t in await _session_tasks(client, "s-many")}
                if states == {TaskState.TASK_STATE_INPUT_REQUIRED}:
                    break
                await asyncio.sleep(0.02)
            await client.cancel()
            tasks = await _session_tasks(client, "s-many")
    assert len(tasks) == 2
    assert {t.status.state for t in tasks} == {TaskState.TASK_STATE_CANCELED}
