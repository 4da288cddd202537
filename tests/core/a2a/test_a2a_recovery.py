"""A2A sessions across a lost server and lost answers: a restarted agent server, a setup
message whose answer a proxy dropped, and tasks left behind in a session's context."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

import httpx
import pytest
from a2a.server.context import ServerCallContext
from a2a.types import ListTasksRequest, Task, TaskState, TaskStatus
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
    as a proxy that lost the server's answer; ``delay_next_post_s`` answers the next POST
    502 at once and forwards it that much later, as a proxy that gave up on a request
    still on its way (``delayed`` is set once the server handled it)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.drop_next_answer = False
        self.delay_next_post_s: float | None = None
        self.delayed = threading.Event()
        self._late: set[asyncio.Task[None]] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        if self.delay_next_post_s is not None:
            delay_s, self.delay_next_post_s = self.delay_next_post_s, None
            body = []
            while True:
                message = await receive()
                body.append(message)
                if not message.get("more_body"):
                    break
            late = asyncio.ensure_future(self._forward_later(scope, body, delay_s))
            self._late.add(late)
            late.add_done_callback(self._late.discard)
        elif self.drop_next_answer:
            self.drop_next_answer = False
            await self.app(scope, receive, _swallow)
        else:
            return await self.app(scope, receive, send)
        await send({"type": "http.response.start", "status": 502, "headers": []})
        await send({"type": "http.response.body", "body": b"bad gateway"})

    async def _forward_later(self, scope: Scope, body: list[Any], delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        replay = iter(body)

        async def receive() -> Any:
            return next(replay, {"type": "http.disconnect"})

        try:
            await self.app(scope, receive, _swallow)
        finally:
            self.delayed.set()


async def _swallow(message: object) -> None:
    pass


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


async def test_a_setup_still_on_its_way_when_the_client_looks_is_not_set_up_twice():
    app, setups = _counting_setup_app()
    front = Swappable(a2a_app(app))
    # the first send is answered 502 at once but reaches the server after the resend
    front.delay_next_post_s = 0.3
    with serve_app(front, lifespan="off") as url:
        async with httpx.AsyncClient() as http:
            client = A2ATaskClient(build_a2a_client(http, url + "/"), "s-late", poll_max_s=0.05)
            await client.setup(TASK)
            dump = await client.run(TASK)
            deadline = time.monotonic() + 5
            while not front.delayed.is_set():
                assert time.monotonic() < deadline
                await asyncio.sleep(0.02)
            tasks = await _session_tasks(client, "s-late")
    assert dump.ok and client.retried >= 1
    # the late first send was answered with the session's task: one setup, one task
    assert setups == ["s-late"]
    assert [(t.id, t.status.state) for t in tasks] == [
        (client.task_id, TaskState.TASK_STATE_COMPLETED)
    ]


async def test_setups_of_one_context_all_get_its_first_task():
    app, setups = _counting_setup_app()
    with serve_app(a2a_app(app)) as url:
        async with httpx.AsyncClient() as http:
            client = A2ATaskClient(build_a2a_client(http, url + "/"), "s-twice", poll_max_s=0.05)

            def setup() -> object:
                message = task_message(TASK, message_id=uuid.uuid4().hex, context_id="s-twice")
                return client._send(message)

            at_once = await asyncio.gather(*(setup() for _ in range(3)))
            await client.setup(TASK)  # a retrying client attaches to it, parked or not
            later = await setup()
            tasks = await _session_tasks(client, "s-twice")
    assert len({t.id for t in at_once}) == 1
    assert client.task_id == later.id == at_once[0].id
    assert setups == ["s-twice"] and len(tasks) == 1


async def test_a_setup_with_another_task_in_a_context_already_set_up_is_refused():
    """As over HTTP (409): a session id already set up for another task is a client's
    mistake; attaching the second setup to the first task would run the wrong task."""
    app, setups = _counting_setup_app()
    with serve_app(a2a_app(app)) as url:
        async with httpx.AsyncClient() as http:
            first = A2ATaskClient(build_a2a_client(http, url + "/"), "s-reused", poll_max_s=0.05)
            await first.setup(TASK)
            again = A2ATaskClient(build_a2a_client(http, url + "/"), "s-reused", poll_max_s=0.05)
            await again.setup(dict(TASK))  # the same task: attaches to the first
            other = A2ATaskClient(build_a2a_client(http, url + "/"), "s-reused", poll_max_s=0.05)
            with pytest.raises(SessionError, match="another task") as info:
                await other.setup({**TASK, "a": 2})
            tasks = await _session_tasks(first, "s-reused")
    assert again.task_id == first.task_id
    assert not info.value.transient and other.retried == 0
    assert setups == ["s-reused"] and len(tasks) == 1


async def test_cancel_cancels_every_task_of_the_session():
    app, _ = _counting_setup_app()
    served = a2a_app(app)
    with serve_app(served) as url:
        async with httpx.AsyncClient() as http:
            client = A2ATaskClient(build_a2a_client(http, url + "/"), "s-many", poll_max_s=0.05)
            await client.setup(TASK)
            # a task in the session's context the client does not know, as a server that
            # sets up a context more than once leaves behind
            stray = Task(id="stray", context_id="s-many",
                         status=TaskStatus(state=TaskState.TASK_STATE_INPUT_REQUIRED))  # fmt: skip
            await served.state.task_store.save(stray, ServerCallContext())
            await client.cancel()
            tasks = await _session_tasks(client, "s-many")
    assert len(tasks) == 2
    assert {t.status.state for t in tasks} == {TaskState.TASK_STATE_CANCELED}
