"""Fixtures for the agent-side tests: served apps, rollout payloads, a shared SeaweedFS."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from rollhub.testing.seaweedfs import seaweedfs_server
from rollhub.testing.servers import serve_app
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.core.app.app_support import API_KEY


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "results"


@pytest.fixture
def make_rollout(store_dir: Path) -> Callable[..., dict[str, Any]]:
    """``make_rollout(session_id, **overrides)`` → a wire ``_rollout`` dict (file store)."""

    def make(session_id: str, **overrides: Any) -> dict[str, Any]:
        data = {
            "exp_id": "exp1",
            "input_id": "q1",
            "session_id": session_id,
            "result_store": f"file://{store_dir}",
            "base_url": "http://127.0.0.1:9/v1",
            "model_id": "test-model",
            "api_key": API_KEY,
            "sampling": {"temperature": 0.7},
        }
        data.update(overrides)
        return data

    return make


@pytest.fixture
def read_doc(store_dir: Path) -> Callable[[str], dict[str, Any] | None]:
    """Read the stored document of a session (exp1/q1), or None."""

    def read(session_id: str, exp_id: str = "exp1", input_id: str = "q1") -> Any:
        path = store_dir / exp_id / input_id / f"{session_id}.json"
        return json.loads(path.read_text()) if path.exists() else None

    return read


@pytest.fixture
def serve() -> Iterator[Callable[[Any], httpx.Client]]:
    """``serve(app)`` → an httpx client bound to the app served by uvicorn on loopback."""
    stack = contextlib.ExitStack()

    def start(app: Any) -> httpx.Client:
        base_url = stack.enter_context(serve_app(app))
        return stack.enter_context(httpx.Client(base_url=base_url, timeout=10))

    with stack:
        yield start


@pytest.fixture(scope="session")
def seaweed_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One SeaweedFS S3 endpoint for the whole test session."""
    with seaweedfs_server(tmp_path_factory.mktemp("seaweed")) as endpoint:
        yield endpoint


@pytest.fixture
def s3_env(monkeypatch: pytest.MonkeyPatch, seaweed_endpoint: str) -> str:
    """Credentials and region for boto3 (SeaweedFS accepts any key), plus the endpoint."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "rollhub-test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "rollhub-test-secret")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    return seaweed_endpoint


class NoticeReceiver:
    """A loopback HTTP endpoint recording completion notices; can fail the first N posts."""

    def __init__(self, fail_first: int = 0, fail_status: int = 503) -> None:
        self.fail_first = fail_first
        self.fail_status = fail_status
        self.attempts: list[tuple[float, dict[str, Any]]] = []
        self.notices: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.app = Starlette(routes=[Route("/notify", self._post, methods=["POST"])])

    async def _post(self, request: Request) -> JSONResponse:
        body = await request.json()
        with self.lock:
            self.attempts.append((time.monotonic(), body))
            if len(self.attempts) <= self.fail_first:
                return JSONResponse({"error": "try later"}, status_code=self.fail_status)
            self.notices.append(body)
        return JSONResponse({"ok": True})


@pytest.fixture
def receiver_factory() -> Iterator[Callable[..., tuple[NoticeReceiver, str]]]:
    """``receiver_factory(fail_first=0)`` → (receiver, its notify URL), served on loopback."""
    stack = contextlib.ExitStack()

    def make(**kwargs: Any) -> tuple[NoticeReceiver, str]:
        receiver = NoticeReceiver(**kwargs)
        base_url = stack.enter_context(serve_app(receiver.app))
        return receiver, f"{base_url}/notify"

    with stack:
        yield make
