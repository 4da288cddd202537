"""Fixtures for client tests: real local runtimes serving the no-op agent app.

``runtime`` is shared by the tests of one module (workers take a second or two to start
on a busy 2-core machine); tests that kill or stop workers use ``fresh_runtime``. Modules
run on a module-scoped event loop: every test module here sets
``pytestmark = pytest.mark.asyncio(loop_scope="module")``, and every async fixture uses
that loop, since a runtime belongs to the loop it was started on.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import pytest_asyncio
from rollhub.client import AsyncRolloutClient
from rollhub.runtimes.local import LocalRuntime
from rollhub.stores.file import FileResultStore

AGENT = str(Path(__file__).with_name("noop_agent.py")) + ":app"


def make_runtime(**options) -> LocalRuntime:
    options = {"workers": 2, "ping_interval_s": 0.2, "startup_timeout_s": 30, **options}
    return LocalRuntime(app=AGENT, **options)


@pytest.fixture(name="make_runtime")
def make_runtime_fixture():
    """Build (not start) a local runtime serving the no-op agent."""
    return make_runtime


@pytest.fixture
def store(tmp_path: Path) -> FileResultStore:
    return FileResultStore(tmp_path / "results", fsync=False)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def runtime():
    rt = make_runtime()
    await rt.start()
    try:
        yield rt
    finally:
        await rt.close()


@pytest_asyncio.fixture(loop_scope="module")
async def fresh_runtime():
    rt = make_runtime()
    await rt.start()
    try:
        yield rt
    finally:
        await rt.close()


@pytest_asyncio.fixture(loop_scope="module")
async def client(runtime: LocalRuntime, store: FileResultStore):
    async with AsyncRolloutClient(runtime, store, exp_id="exp1") as c:
        yield c
