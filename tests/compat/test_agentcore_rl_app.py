"""``AgentCoreRLApp`` over HTTP: sync handlers without context, bad return values, and
rollhub-shaped invocations that show upstream handlers their sampling flat."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
from rollhub.compat.agentcore_rl import AgentCoreRLApp
from rollhub.testing.servers import serve_app

from tests.compat.loopback_aws import BUCKET

SESSION = "X-Amzn-Bedrock-AgentCore-Runtime-Session-Id"


def _wait_for(read, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        doc = read()
        if doc is not None:
            return doc
        time.sleep(0.05)
    raise AssertionError("no result stored")


def test_sync_handler_without_context_and_a_bad_return(aws_env, s3) -> None:
    app = AgentCoreRLApp()

    @app.rollout_entrypoint
    def handler(payload):
        return {"echo": payload["x"]} if payload["x"] else ["not", "a", "dict"]

    def read(key: str):
        try:
            return json.loads(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())
        except s3.exceptions.NoSuchKey:
            return None

    with serve_app(app) as url:
        docs = []
        for i, x in enumerate([7, 0]):
            sid = f"sync-session-{i}-" + "0" * 24
            rollout = {"exp_id": "e-sync", "input_id": f"q{i}", "s3_bucket": BUCKET}
            answer = httpx.post(
                f"{url}/invocations", json={"x": x, "_rollout": rollout}, headers={SESSION: sid}
            ).json()
            assert answer["status"] == "processing"
            assert answer["result_key"] == f"e-sync/q{i}/{sid}.json"
            assert answer["s3_bucket"] == BUCKET
            docs.append(_wait_for(lambda k=answer["result_key"]: read(k)))
    assert docs[0]["echo"] == 7 and docs[0]["status_code"] == 200
    assert docs[1]["status_code"] == 500
    assert (
        docs[1]["stop_reason"] == "Return value must be a dict when S3 save is configured, got list"
    )


def test_rollhub_invocation_sees_sampling_flat(tmp_path: Path) -> None:
    app = AgentCoreRLApp()

    @app.rollout_entrypoint
    async def handler(payload, context):
        return {"temperature": payload["_rollout"]["temperature"], "sid": context.session_id}

    rollout = {
        "exp_id": "e", "input_id": "q", "session_id": "rh-flat", "result_store":
        f"file://{tmp_path}", "sampling": {"temperature": 0.4},
    }  # fmt: skip
    with serve_app(app) as url:
        answer = httpx.post(f"{url}/invocations", json={"_rollout": rollout})
        assert answer.status_code == 200 and "result_key" not in answer.json()
        path = tmp_path / "e" / "q" / "rh-flat.json"
        doc = _wait_for(lambda: json.loads(path.read_text()) if path.exists() else None)
    # rollhub's own layout: no upstream fields, metadata under _rollhub
    assert doc["temperature"] == 0.4 and doc["sid"] == "rh-flat"
    assert "status_code" not in doc and doc["_rollhub"]["status"] == "ok"
