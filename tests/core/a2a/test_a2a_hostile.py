"""A2A tasks under hostile use: run messages racing each other, results that are not JSON."""

from __future__ import annotations

import asyncio
import datetime
import math
import uuid

import httpx
import pytest
from a2a.types import TaskState
from rollhub.a2a.client import A2ATaskClient, build_a2a_client
from rollhub.a2a.server import a2a_app
from rollhub.a2a.wire import ARTIFACT_NAME, task_message
from rollhub.app import RolloutApp
from rollhub.testing.servers import serve_app


def _counting_app() -> tuple[RolloutApp, list[str]]:
    app = RolloutApp()
    runs: list[str] = []

    @app.rollout_setup
    async def setup(payload):
        await asyncio.sleep(0.05)

    @app.rollout_entrypoint
    async def solve(payload):
        runs.append(payload["id"])
        await asyncio.sleep(0.3)
        if payload.get("bad") == "nan":
            return {"rewards": 1.0, "metrics": {"loss": math.nan}}
        if payload.get("bad") == "datetime":
            return {"rewards": 1.0, "when": datetime.datetime(2024, 1, 1)}
        return {"rewards": 1.0}

    return app, runs


@pytest.fixture
def served():
    app, runs = _counting_app()
    with serve_app(a2a_app(app)) as url:
        yield runs, url


async def test_two_run_messages_at_once_run_the_rollout_once(served):
    runs, url = served
    async with httpx.AsyncClient() as http:
        client = A2ATaskClient(build_a2a_client(http, url + "/"), "race")
        await client.setup({"id": "race"})
        messages = [
            task_message(
                {"id": "race"},
                message_id=uuid.uuid4().hex,
                context_id="race",
                task_id=client.task_id,
            )
            for _ in range(2)
        ]
        # both are answered at once (return_immediately); the SDK queues the second
        await asyncio.gather(*(client._send(m) for m in messages), return_exceptions=True)
        for _ in range(200):
            task = await client._get()
            if task.status.state == TaskState.TASK_STATE_COMPLETED:
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.5)  # time for a second run to show, were there one
        task = await client._get()
    assert runs == ["race"]
    assert TaskState.Name(task.status.state) == "TASK_STATE_COMPLETED"
    assert [a.name for a in task.artifacts] == [ARTIFACT_NAME]


@pytest.mark.parametrize(
    ("bad", "fragment"),
    [
        ("nan", "result['metrics']['loss']: nan is not valid JSON"),
        ("datetime", "result['when']: datetime is not JSON serialisable"),
    ],
)
async def test_a_result_that_is_not_json_names_the_key_path(served, bad, fragment):
    _, url = served
    task = {"id": f"bad-{bad}", "bad": bad}
    async with httpx.AsyncClient() as http:
        client = A2ATaskClient(build_a2a_client(http, url + "/"), f"bad-{bad}")
        await client.setup(task)
        dump = await client.run(task)
    assert not dump.ok and dump.error.type == "InvalidResultError"
    assert fragment in dump.error.message
