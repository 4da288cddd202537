"""S3ResultStore against a real SeaweedFS, and botocore error mapping."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid

import boto3
import pytest
from botocore.stub import Stubber
from rollhub.errors import StoreError
from rollhub.stores import InvalidKeyError, open_store
from rollhub.stores.s3 import S3ResultStore


def _store(endpoint: str, prefix: str = "runs") -> S3ResultStore:
    bucket = f"t-{uuid.uuid4().hex[:12]}"
    store = open_store(f"s3://{bucket}/{prefix}", endpoint_url=endpoint, create_bucket=True)
    assert isinstance(store, S3ResultStore)
    return store


def test_round_trip_against_seaweedfs(s3_env: str) -> None:
    store = _store(s3_env)
    assert store.get("e/q/s1.json") is None  # 404 -> None
    assert not store.exists("e/q/s1.json")
    store.put("e/q/s1.json", {"rewards": 1.0, "text": "héllo"})
    store.put("e/q/s2.json", {"rewards": 0.0})
    store.put("e/q2/s3.json", {"rewards": 0.5})
    assert store.get("e/q/s1.json") == {"rewards": 1.0, "text": "héllo"}
    assert store.exists("e/q/s1.json")
    assert store.list() == ["e/q/s1.json", "e/q/s2.json", "e/q2/s3.json"]
    assert store.list("e/q/") == ["e/q/s1.json", "e/q/s2.json"]
    store.delete("e/q/s1.json")
    store.delete("e/q/s1.json")
    assert store.get("e/q/s1.json") is None and store.list("e/q/") == ["e/q/s2.json"]
    assert store.location("e/q/s2.json") == f"{store.url}/e/q/s2.json"
    # the prefix is really a prefix in the bucket
    raw = boto3.client("s3", endpoint_url=s3_env).list_objects_v2(Bucket=store.bucket)
    assert sorted(o["Key"] for o in raw["Contents"]) == ["runs/e/q/s2.json", "runs/e/q2/s3.json"]


def test_large_object(s3_env: str) -> None:
    store = _store(s3_env, prefix="")
    doc = {"blob": "x" * 12_000_000, "rewards": 1.0}
    store.put("big/doc.json", doc)
    assert store.get("big/doc.json") == doc


def test_endpoint_from_environment(s3_env: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROLLHUB_S3_ENDPOINT_URL", s3_env)
    store = S3ResultStore.from_url(f"s3://env-{uuid.uuid4().hex[:8]}", create_bucket=True)
    assert store.endpoint_url == s3_env
    store.put("a.json", {"ok": True})
    assert store.get("a.json") == {"ok": True}


def test_traversal_keys_rejected_before_any_request() -> None:
    store = S3ResultStore("bucket", "p", endpoint_url="http://127.0.0.1:9")
    for key in ("../x.json", "/abs.json", "a/\x00.json", "a\\b.json"):
        with pytest.raises(InvalidKeyError, match="store key"):
            store.put(key, {})
    assert store._client is None  # nothing was sent anywhere


def _stubbed(bucket: str = "b") -> tuple[S3ResultStore, Stubber]:
    client = boto3.client(
        "s3",
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="y",
        endpoint_url="http://127.0.0.1:9",
    )
    return S3ResultStore(bucket, "p", client=client), Stubber(client)


def test_service_errors_map_to_store_error() -> None:
    store, stub = _stubbed()
    stub.add_client_error("put_object", "AccessDenied", "Access Denied", 403)
    stub.add_client_error("get_object", "NoSuchKey", "no key", 404)
    stub.add_client_error("get_object", "InternalError", "boom", 500)
    stub.add_client_error("head_object", "404", "Not Found", 404)
    with stub:
        with pytest.raises(
            StoreError, match=re.escape("S3 put 'a.json' in s3://b/p failed")
        ) as err:
            store.put("a.json", {"x": 1})
        from botocore.exceptions import ClientError

        assert isinstance(err.value.__cause__, ClientError)
        assert err.value.code == "AccessDenied"
        assert store.get("a.json") is None
        with pytest.raises(StoreError, match="InternalError"):
            store.get("a.json")
        assert store.exists("a.json") is False
    stub.assert_no_pending_responses()


def test_put_is_confirmed_by_head() -> None:
    store, stub = _stubbed()
    stub.add_response(
        "put_object",
        {"ETag": '"1"'},
        {"Bucket": "b", "Key": "p/a.json", "Body": b'{"x": 1}', "ContentType": "application/json"},
    )
    stub.add_response("head_object", {"ContentLength": 3}, {"Bucket": "b", "Key": "p/a.json"})
    with stub, pytest.raises(StoreError, match="stored 3 bytes, expected 8"):
        store.put("a.json", {"x": 1})


def test_unreachable_endpoint_is_a_store_error() -> None:
    store = S3ResultStore(
        "b",
        endpoint_url="http://127.0.0.1:9",
        max_attempts=1,
        aws_access_key_id="x",
        aws_secret_access_key="y",
        region_name="us-east-1",
    )
    with pytest.raises(StoreError, match="reachable") as err:
        store.get("a.json")
    assert err.value.__cause__ is not None


def test_importing_the_app_and_stores_does_not_import_boto3() -> None:
    code = (
        "import sys, rollhub.app, rollhub.stores.s3, rollhub.builtin.stores;"
        "from rollhub.plugins import build_host; build_host(entry_points=False);"
        "from rollhub.stores import open_store; open_store('s3://b/p');"
        "assert 'boto3' not in sys.modules and 'botocore' not in sys.modules, 'boto3 imported';"
        "assert 'aiohttp' not in sys.modules, 'aiohttp imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
