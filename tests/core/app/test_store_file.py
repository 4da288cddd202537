"""FileResultStore and open_store: round trips, atomic writes, keys that cannot escape."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rollhub.errors import StoreError, UnknownComponentError
from rollhub.plugins import build_host
from rollhub.stores import InvalidKeyError, open_store
from rollhub.stores.file import FileResultStore


def test_round_trip_list_delete(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}/r")
    assert isinstance(store, FileResultStore)
    assert store.get("e/q/s1.json") is None and not store.exists("e/q/s1.json")
    store.put("e/q/s1.json", {"rewards": 1.0, "text": "héllo"})
    store.put("e/q/s2.json", {"rewards": 0.0})
    store.put("e/q2/s3.json", {"rewards": 0.5})
    store.put("other/x.json", {})
    assert store.get("e/q/s1.json") == {"rewards": 1.0, "text": "héllo"}
    assert store.exists("e/q/s1.json")
    assert store.list() == ["e/q/s1.json", "e/q/s2.json", "e/q2/s3.json", "other/x.json"]
    assert store.list("e/q/") == ["e/q/s1.json", "e/q/s2.json"]
    assert store.list("e/q") == ["e/q/s1.json", "e/q/s2.json", "e/q2/s3.json"]
    assert store.list("nothing/") == []
    store.delete("e/q/s1.json")
    store.delete("e/q/s1.json")  # missing: no error
    assert store.get("e/q/s1.json") is None
    assert store.location("e/q/s2.json") == f"file://{tmp_path}/r/e/q/s2.json"


def test_relative_url_is_relative_to_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    store = open_store("file://runs/x")
    assert store.url == f"file://{tmp_path}/runs/x"
    store.put("a/b.json", {"k": 1})
    assert json.loads((tmp_path / "runs" / "x" / "a" / "b.json").read_text()) == {"k": 1}


@pytest.mark.parametrize(
    "key",
    [
        "../escape.json",
        "a/../../escape.json",
        "/etc/passwd",
        "a/\x00b.json",
        "a\\b.json",
        "",
        "a//b",
    ],
)
def test_keys_that_could_escape_are_rejected(tmp_path: Path, key: str) -> None:
    store = FileResultStore(tmp_path / "root")
    for call in (
        lambda: store.put(key, {"x": 1}),
        lambda: store.get(key),
        lambda: store.exists(key),
        lambda: store.delete(key),
    ):
        with pytest.raises(InvalidKeyError) as err:
            call()
        assert isinstance(err.value, StoreError) and isinstance(err.value, ValueError)
        assert repr(key) in str(err.value)
    assert not (tmp_path / "escape.json").exists()
    assert not any(tmp_path.rglob("*.json"))


def test_writes_are_atomic_under_concurrent_readers(tmp_path: Path) -> None:
    store = FileResultStore(tmp_path, fsync=False)
    big = {"blob": "x" * 200_000}
    store.put("k/doc.json", {"blob": ""})
    stop = threading.Event()
    seen: list[int] = []

    def reader() -> None:
        while not stop.is_set():
            doc = store.get("k/doc.json")  # never a partial document: json.loads would fail
            seen.append(len(doc["blob"]))

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for i in range(30):
        store.put("k/doc.json", big if i % 2 else {"blob": ""})
    stop.set()
    for t in threads:
        t.join()
    assert set(seen) <= {0, 200_000} and seen
    assert os.listdir(tmp_path / "k") == ["doc.json"]  # no temp files left behind


def test_non_json_document_and_corrupt_file_raise_store_error(tmp_path: Path) -> None:
    store = FileResultStore(tmp_path)
    with pytest.raises(StoreError, match="not JSON"):
        store.put("a.json", {"x": object()})
    assert not store.exists("a.json") and store.list() == []
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(StoreError, match="not valid JSON"):
        store.get("bad.json")


def test_write_failure_maps_to_store_error(tmp_path: Path) -> None:
    (tmp_path / "blocker").write_text("a file where a directory should be")
    store = FileResultStore(tmp_path)
    with pytest.raises(StoreError) as err:
        store.put("blocker/x.json", {})
    assert isinstance(err.value.__cause__, OSError)


def test_open_store_names_valid_schemes_and_uses_registry(tmp_path: Path) -> None:
    with pytest.raises(UnknownComponentError, match=r"valid schemes: file://, s3://"):
        open_store("gs://bucket/x")
    with pytest.raises(UnknownComponentError, match="no scheme"):
        open_store("just/a/path")
    host = build_host(entry_points=False)
    # agentcore-rl+s3: S3 results in agentcore-rl-toolkit's layout (the built-in compat plugin)
    assert host.registry.names("store") == ["agentcore-rl+s3", "file", "s3"]
    assert isinstance(open_store(f"file://{tmp_path}", host), FileResultStore)
    with pytest.raises(UnknownComponentError, match=r"installed: agentcore-rl\+s3, file, s3"):
        open_store("gs://bucket", host)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab./\\\x00~", max_size=12))
def test_no_accepted_key_leaves_the_root(key: str) -> None:
    root = Path("/srv/rollhub-results")
    store = FileResultStore(root)
    try:
        path = store.path(key)
    except InvalidKeyError:
        return
    assert os.path.normpath(path).startswith(str(root) + os.sep)
