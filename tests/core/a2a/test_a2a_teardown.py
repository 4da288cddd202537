"""``@app.rollout_teardown`` frees what ``@app.rollout_setup`` made, once per session and on
every way out: after the run (its result kept even when the teardown fails), after a
setup that failed part way, on a cancel before the run, and when the served app evicts a
parked task whose client never came back."""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
from pathlib import Path

import httpx
import pytest
from rollhub.a2a.client import A2ATaskClient, build_a2a_client
from rollhub.a2a.server import a2a_app
from rollhub.a2a.taskstore import EvictingTaskStore
from rollhub.app import RolloutApp
from rollhub.errors import SessionError
from rollhub.testing.servers import serve_app

from tests.core.a2a.waiting import until


def workspace_app(root: Path) -> tuple[RolloutApp, list[str]]:
    """Setup makes a workspace folder; teardown removes it and logs the session."""
    app = RolloutApp()
    torn: list[str] = []

    @app.rollout_setup
    def setup(payload, context):
        (root / context.session_id).mkdir()
        if payload.get("fail_setup"):
            raise RuntimeError("the image did not start")

    @app.rollout_entrypoint
    async def solve(payload, context):
        assert (root / context.session_id).is_dir()
        return {"rewards": 1.0}

    @app.rollout_teardown
    def teardown(payload, context):
        time.sleep(payload.get("teardown_s", 0))  # deleting a sandbox can take a while
        torn.append(context.session_id)
        (root / context.session_id).rmdir()
        if payload.get("fail_teardown"):
            raise OSError("the volume is busy")

    return app, torn


@pytest.mark.parametrize("fail_teardown", [False, True])
async def test_teardown_runs_once_after_the_run_and_never_replaces_its_result(
    tmp_path, fail_teardown
):
    app, torn = workspace_app(tmp_path)
    task = {"fail_teardown": fail_teardown, "teardown_s": 1.5}
    with serve_app(a2a_app(app)) as url:
        async with httpx.AsyncClient() as http:
            client = A2ATaskClient(build_a2a_client(http, url + "/"), "s-run", poll_max_s=0.05)
            await client.setup(task)
            started = time.monotonic()
            dump = await client.run(task)
            took = time.monotonic() - started
            await until(lambda: torn)
            await client.cancel()  # a cancel after the end frees nothing twice
    assert dump.ok and dump.reward == 1.0
    assert took < 1.2  # a slow teardown never holds the rollout's result back
    assert torn == ["s-run"] and not (tmp_path / "s-run").exists()


async def test_teardown_frees_what_a_failed_setup_made(tmp_path):
    app, torn = workspace_app(tmp_path)
    with serve_app(a2a_app(app)) as url:
        async with httpx.AsyncClient() as http:
            client = A2ATaskClient(build_a2a_client(http, url + "/"), "s-bad", poll_max_s=0.05)
            with pytest.raises(SessionError, match="did not start"):
                await client.setup({"fail_setup": True})
    assert torn == ["s-bad"] and not (tmp_path / "s-bad").exists()


async def test_teardown_runs_on_a_cancel_and_on_an_eviction_before_the_run(tmp_path):
    app, torn = workspace_app(tmp_path)
    store = EvictingTaskStore(parked_idle_s=0.3, sweep_s=0.05)
    with serve_app(a2a_app(app, task_store=store)) as url:
        async with httpx.AsyncClient() as http:
            a2a = build_a2a_client(http, url + "/")
            cancelled = A2ATaskClient(a2a, "s-cancel", poll_max_s=0.05)
            await cancelled.setup({})
            await cancelled.cancel()
            assert torn == ["s-cancel"]
            gone = A2ATaskClient(a2a, "s-gone", poll_max_s=0.05)
            await gone.setup({})  # its client dies here: nothing reads the task again
            await until(lambda: "s-gone" in torn)
    assert torn == ["s-cancel", "s-gone"] and list(tmp_path.iterdir()) == []


def slow_setup_app(root: Path, *, run_blocks: bool = False) -> tuple[RolloutApp, list[str], dict]:
    """A sync setup (or run) that goes on after a cancel, as a thread cannot be stopped,
    and makes its workspace only then; teardown removes what it finds."""
    app = RolloutApp()
    torn: list[str] = []
    gates = {"entered": threading.Event(), "release": threading.Event()}

    def block_then_make(session_id: str) -> None:
        gates["entered"].set()
        gates["release"].wait(10)
        (root / session_id).mkdir()

    @app.rollout_setup
    def setup(payload, context):
        if not run_blocks:
            block_then_make(context.session_id)

    @app.rollout_entrypoint
    def solve(payload, context):
        block_then_make(context.session_id)
        return {"rewards": 1.0}

    @app.rollout_teardown
    def teardown(payload, context):
        time.sleep(payload.get("teardown_s", 0))  # deleting a sandbox can take a while
        torn.append(context.session_id)
        shutil.rmtree(root / context.session_id, ignore_errors=True)

    return app, torn, gates


@pytest.mark.parametrize("phase", ["setup", "run"])
async def test_a_cancel_tears_down_only_once_the_blocking_handler_returned(tmp_path, phase):
    app, torn, gates = slow_setup_app(tmp_path, run_blocks=phase == "run")
    with serve_app(a2a_app(app)) as url:
        async with httpx.AsyncClient() as http:
            client = A2ATaskClient(build_a2a_client(http, url + "/"), "s-slow", poll_max_s=0.05)
            if phase == "run":
                await client.setup({})
                started = asyncio.ensure_future(client.run({}))
            else:
                started = asyncio.ensure_future(client.setup({}))
            await until(gates["entered"].is_set)
            await client.cancel()  # the handler's thread runs on: Python cannot stop it
            await asyncio.sleep(0.2)
            early = list(torn)
            gates["release"].set()  # it returns now, having made its workspace
            await until(lambda: torn)
            await asyncio.sleep(0.2)  # time for a wrong second teardown to show
            started.cancel()
            await asyncio.gather(started, return_exceptions=True)
    assert early == []  # not while the handler still ran
    assert torn == ["s-slow"] and list(tmp_path.iterdir()) == []
