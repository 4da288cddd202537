"""The cross tests against agentcore-rl-toolkit 0.1.4, run in its own environment.

0.1.4's app and client contract (``_rollout`` fields, result key, document fields, HTTP
answer) is the one 0.2.0 has; these tests prove it against the real 0.1.4 code: its
client drives a rollhub agent, and rollhub's client drives its agent.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest
from rollhub.compat.agentcore_local import runtime_arn
from rollhub.compat.upstream_client import RolloutClient
from rollhub.testing.servers import serve_app

from tests.compat import rollhub_math_app
from tests.compat.loopback_aws import BUCKET
from tests.compat.upstream_venv import upstream_python

DRIVER = os.path.join(os.path.dirname(__file__), "upstream_driver.py")
ROLLHUB_ARN = runtime_arn("rollhub_math_014")
UPSTREAM_ARN = runtime_arn("upstream_math_014")


@pytest.fixture(scope="session")
def python014() -> str:
    return str(upstream_python())


@pytest.fixture
def upstream_014_agent(plane, python014: str) -> Iterator[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([python014, DRIVER, "agent", str(port)], env=dict(os.environ))
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/ping", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, "the 0.1.4 agent exited"
            assert time.monotonic() < deadline, "the 0.1.4 agent did not answer /ping"
            time.sleep(0.2)
        plane.app.add_runtime(UPSTREAM_ARN, url)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_014_client_drives_rollhub_agent(plane, python014: str) -> None:
    payloads = [{"a": i, "b": 1, "answer": i + 1 if i != 2 else 0} for i in range(4)]
    payloads.append({"a": 0, "b": 0, "answer": 0, "fail": "boom"})
    with serve_app(rollhub_math_app.make_app()) as url:
        plane.app.add_runtime(ROLLHUB_ARN, url)
        done = subprocess.run(
            [python014, DRIVER, "client", ROLLHUB_ARN, BUCKET, "exp-014"],
            input=json.dumps(payloads), capture_output=True, text=True, timeout=120,
            env=dict(os.environ), check=True,
        )  # fmt: skip
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["version"] == "0.1.4"
    items = {item["index"]: item for item in out["items"]}
    assert sorted(items) == [0, 1, 2, 3, 4]
    assert all(item["success"] for item in items.values())
    for i in range(4):
        doc = items[i]["result"]
        assert doc["rewards"] == (0.0 if i == 2 else 1.0)
        assert doc["status_code"] == 200 and doc["s3_bucket"] == BUCKET
        assert doc["result_key"] == f"exp-014/{doc['input_id']}/{doc['session_seen']}.json"
        assert doc["temperature_seen"] == 0.5
    failed = items[4]["result"]
    assert (failed["status_code"], failed["stop_reason"]) == (500, "asked to fail: boom")


def test_rollhub_client_drives_014_agent(upstream_014_agent) -> None:
    client = RolloutClient(UPSTREAM_ARN, BUCKET, "exp-014b", temperature=0.5)
    payloads = [{"a": 1, "b": 2, "answer": 3}, {"a": 0, "b": 0, "answer": 0, "fail": "z"}]
    try:
        items = {i.index: i for i in client.run_batch(payloads, max_concurrent_sessions=2)}
    finally:
        client.close()
    assert items[0].success and items[0].result["rewards"] == 1.0
    assert items[0].result["temperature_seen"] == 0.5
    assert items[1].success and items[1].result["status_code"] == 500
    assert items[1].result["stop_reason"] == "bad input z"
