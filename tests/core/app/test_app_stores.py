"""The app with stores from a plugin registry: retried writes, unwritable stores."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, ClassVar

from rollhub import hookimpl
from rollhub.app import RolloutApp
from rollhub.errors import StoreError
from rollhub.plugins import build_host
from rollhub.registry import ComponentRegistry
from rollhub.rollout import RESULT_META_KEY
from rollhub.stores.base import ResultStore

from tests.core.app.app_support import wait_for


class MemoryStore(ResultStore):
    """A ``mem://`` store kept in a class-level dict; fails its first ``fail_times`` puts."""

    name: ClassVar[str] = "mem"
    data: ClassVar[dict[str, dict[str, Any]]] = {}
    puts: ClassVar[list[str]] = []
    lock = threading.Lock()

    def __init__(self, url: str, fail_times: int = 0) -> None:
        self._url = url.rstrip("/")
        self.fail_times = fail_times

    @classmethod
    def from_url(cls, url: str, **options: Any) -> MemoryStore:
        return cls(url, **options)

    @property
    def url(self) -> str:
        return self._url

    def put(self, key: str, document: dict[str, Any]) -> None:
        with self.lock:
            self.puts.append(key)
            if self.fail_times > 0:
                self.fail_times -= 1
                raise StoreError("injected write failure", key=key)
            self.data[f"{self._url}/{key}"] = document

    def get(self, key: str) -> dict[str, Any] | None:
        return self.data.get(f"{self._url}/{key}")

    def exists(self, key: str) -> bool:
        return f"{self._url}/{key}" in self.data

    def list(self, prefix: str = "") -> list[str]:
        return sorted(k for k in self.data if k.startswith(f"{self._url}/{prefix}"))

    def delete(self, key: str) -> None:
        self.data.pop(f"{self._url}/{key}", None)


class MemoryPlugin:
    @hookimpl
    def rollhub_register_components(self, registry: ComponentRegistry) -> None:
        registry.add_store(MemoryStore)


def _app(fail_times: int) -> RolloutApp:
    MemoryStore.data.clear()
    MemoryStore.puts.clear()
    host = build_host(entry_points=False, plugins=[MemoryPlugin()])
    app = RolloutApp(registry=host, store_options={"fail_times": fail_times})

    @app.rollout_entrypoint
    def handler(payload: dict[str, Any]) -> dict[str, Any]:
        payload["question"] = "mutated by the agent"
        return {"rewards": 1.0}

    return app


def test_plugin_store_and_retried_write(
    serve: Callable, make_rollout: Callable, receiver_factory: Callable
) -> None:
    receiver, url = receiver_factory()
    client = serve(_app(fail_times=1))
    rollout = make_rollout("m1", result_store="mem://bucket/run", callback_url=url)
    r = client.post("/invocations", json={"question": "original", "_rollout": rollout})
    assert r.json()["result"] == "mem://bucket/run/exp1/q1/m1.json"
    doc = wait_for(lambda: MemoryStore.data.get("mem://bucket/run/exp1/q1/m1.json"))
    assert MemoryStore.puts == ["exp1/q1/m1.json", "exp1/q1/m1.json"]
    assert doc["rewards"] == 1.0
    assert doc[RESULT_META_KEY]["payload"] == {"question": "original"}  # as received
    wait_for(lambda: receiver.notices)
    assert [n["session_id"] for n in receiver.notices] == ["m1"]


def test_unwritable_store_ends_the_rollout_with_a_store_error_notice(
    serve: Callable, make_rollout: Callable, receiver_factory: Callable
) -> None:
    receiver, url = receiver_factory()
    app = _app(fail_times=100)
    client = serve(app)
    rollout = make_rollout("m2", result_store="mem://bucket", callback_url=url)
    client.post("/invocations", json={"question": "q", "_rollout": rollout})
    wait_for(lambda: len(MemoryStore.puts) == 3, timeout=5)
    wait_for(lambda: client.get("/ping").json()["status"] == "Healthy")
    listing = client.get("/rollouts").json()
    assert listing["running"] == []
    assert "injected write failure" in listing["store_failed"]["m2"]
    wait_for(lambda: receiver.notices)
    (notice,) = receiver.notices
    assert MemoryStore.data == {} and notice["status"] == "store_error"
    assert notice["error"]["type"] == "StoreError"
    assert "after 3 tries" in notice["error"]["message"]
    assert "injected write failure" in notice["error"]["message"]


def test_unknown_scheme_and_bad_callback_are_400(serve: Callable, make_rollout: Callable) -> None:
    client = serve(_app(fail_times=0))
    r = client.post("/invocations", json={"_rollout": make_rollout("x", result_store="gs://b")})
    assert r.status_code == 400 and r.json()["field"] == "_rollout.result_store"
    assert "installed: agentcore-rl+s3, file, mem, s3" in r.json()["error"]
    r = client.post("/invocations", json={"_rollout": make_rollout("x", callback_url="ftp://h")})
    assert r.status_code == 400 and r.json()["field"] == "_rollout.callback_url"
