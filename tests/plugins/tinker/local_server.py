"""Fixtures that run the real local Tinker-compatible server (skyrl, JAX on CPU) for tests.

Use them from a conftest or a test module by importing them::

    from tests.plugins.tinker.local_server import tinker_local_env, tinker_server_factory

``tinker_local_env`` builds the server environment once per machine (later sessions reuse it
through its stamp, under ``$ROLLHUB_TINKER_LOCAL_DIR`` or ``~/.cache/rollhub/tinker-local``).
``tinker_server_factory`` starts servers, each with a fresh state directory and a short
session timeout, and stops every one it started at the end of the session; a module that
wants its memory back earlier stops its server itself (``server.stop()`` is idempotent).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from rollhub_tinker.local_server import LocalTinkerServer, SetupInfo

log = logging.getLogger(__name__)

#: seconds without heartbeat before the server frees a finished client's adapter slot
TEST_SESSION_TIMEOUT_SEC = 30

StartServer = Callable[..., LocalTinkerServer]


@pytest.fixture(scope="session")
def tinker_local_env() -> SetupInfo:
    """The server environment and converted model, built at most once (minutes the first time)."""
    info = LocalTinkerServer().setup()
    log.info(
        "tinker-local environment %s (reused=%s, %.1f s)", info.env_dir, info.reused, info.seconds
    )
    return info


@pytest.fixture(scope="session")
def tinker_server_factory(
    tinker_local_env: SetupInfo, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StartServer]:
    """A function that starts a ready server (keyword options of LocalTinkerServer) on a free port."""
    started: list[LocalTinkerServer] = []

    def start(**options: Any) -> LocalTinkerServer:
        options.setdefault("session_timeout_sec", TEST_SESSION_TIMEOUT_SEC)
        options.setdefault("state_dir", tmp_path_factory.mktemp("tinker-local-state"))
        server = LocalTinkerServer(tinker_local_env.env_dir, **options)
        started.append(server)
        server.start()
        return server

    yield start
    for server in started:
        server.stop()
