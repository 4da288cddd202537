"""``rollhub.compat.AgentCoreRLApp`` answers as upstream's app does, side by side with the
real one (agentcore-rl-toolkit 0.2.0) on the same requests, and keeps upstream's public
attributes (``handlers["main"]``, ``s3_client``, ``save_result``), with SeaweedFS as S3."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from types import SimpleNamespace
from unittest import mock

import httpx
import pytest
from agentcore_rl_toolkit import AgentCoreRLApp as UpstreamApp
from rollhub.compat import AgentCoreRLApp
from rollhub.testing.servers import serve_app

from tests.compat.loopback_aws import BUCKET

SESSION = "X-Amzn-Bedrock-AgentCore-Runtime-Session-Id"


def _app(cls, seen: list, sync: bool):
    app = cls()
    if sync:

        @app.rollout_entrypoint
        def handler(payload, context):
            seen.append((payload.get("x"), context.session_id))
            return {"echo": payload.get("x")}

    else:

        @app.rollout_entrypoint
        async def handler(payload, context):
            seen.append((payload.get("x"), context.session_id))
            return {"echo": payload.get("x")}

    return app


def _wait(check, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("timed out waiting")


def _keys(s3, prefix: str) -> list[str]:
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix)
    return [obj["Key"] for obj in listed.get("Contents", [])]


UNSAVED = [
    {"x": 1},
    {"x": 2, "_rollout": {}},
    {"x": 3, "_rollout": {"base_url": "http://127.0.0.1:9/v1", "model_id": "m"}},
]
PARTIAL = [
    ({"exp_id": "e-part", "s3_bucket": BUCKET}, "input_id"),
    ({"input_id": "q", "s3_bucket": BUCKET}, "exp_id"),
    ({"exp_id": "e-part", "input_id": "q"}, "s3_bucket"),
]


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
def test_same_answers_as_upstreams_app(aws_env, s3, sync: bool) -> None:
    seen: dict[str, list] = {"upstream": [], "compat": []}
    apps = {"upstream": _app(UpstreamApp, seen["upstream"], sync)}
    apps["compat"] = _app(AgentCoreRLApp, seen["compat"], sync)
    answers: dict[str, list] = {"upstream": [], "compat": []}
    for side, app in apps.items():
        with serve_app(app) as url:
            for i, payload in enumerate(UNSAVED):
                sid = f"{side}-unsaved-{i}-" + "0" * 30
                answer = httpx.post(f"{url}/invocations", json=payload, headers={SESSION: sid})
                answers[side].append((answer.status_code, answer.json()))
            _wait(lambda s=side: len(seen[s]) == len(UNSAVED))
            for rollout, _ in PARTIAL:
                answer = httpx.post(f"{url}/invocations", json={"x": 0, "_rollout": rollout})
                answers[side].append((answer.status_code, answer.json()))
            rollout = {"exp_id": f"e-{side}", "input_id": "q", "s3_bucket": BUCKET}
            sid = f"{side}-saved-" + "0" * 30
            answer = httpx.post(
                f"{url}/invocations", json={"x": 9, "_rollout": rollout}, headers={SESSION: sid}
            )
            body = answer.json()
            answers[side].append((answer.status_code, body["status"], sorted(body)))
            _wait(lambda s=side: _keys(s3, f"e-{s}/"))
    assert answers["compat"] == answers["upstream"]
    # the handler ran without _rollout's S3 fields, and nothing was stored for those calls
    assert sorted(seen["compat"]) == [
        (1, "compat-unsaved-0" + "-" + "0" * 30),
        (2, "compat-unsaved-1" + "-" + "0" * 30),
        (3, "compat-unsaved-2" + "-" + "0" * 30),
        (9, "compat-saved-" + "0" * 30),
    ]
    assert answers["compat"][:3] == [(200, {"status": "processing"})] * 3
    missing = [
        (500, {"error": f"Missing required rollout config field: '{f}'"}) for _, f in PARTIAL
    ]
    assert answers["compat"][3:6] == missing
    assert _keys(s3, "e-part/") == []
    upstream_doc = json.loads(
        s3.get_object(Bucket=BUCKET, Key=_keys(s3, "e-upstream/")[0])["Body"].read()
    )
    compat_doc = json.loads(
        s3.get_object(Bucket=BUCKET, Key=_keys(s3, "e-compat/")[0])["Body"].read()
    )
    assert set(upstream_doc) <= set(compat_doc)
    assert compat_doc["echo"] == 9 and compat_doc["status_code"] == 200


async def test_handlers_main_is_upstreams_entrypoint(aws_env) -> None:
    seen: list = []
    app = _app(AgentCoreRLApp, seen, sync=False)
    main = app.handlers["main"]
    context = SimpleNamespace(session_id="direct-" + "0" * 30)
    with pytest.raises(ValueError, match="Missing required rollout config field: 's3_bucket'"):
        await main({"_rollout": {"exp_id": "e", "input_id": "q"}}, context)
    assert await main({"x": 5}, context) == {"status": "processing"}
    for _ in range(400):
        if seen:
            break
        await asyncio.sleep(0.05)
    assert seen == [(5, "direct-" + "0" * 30)]


def test_assigned_s3_client_is_the_one_used(aws_env, s3) -> None:
    app = _app(AgentCoreRLApp, [], sync=True)
    app.s3_client = mock.Mock(wraps=s3)
    rollout = {"exp_id": "e-assigned", "input_id": "q", "s3_bucket": BUCKET}
    with serve_app(app) as url:
        body = httpx.post(f"{url}/invocations", json={"x": 4, "_rollout": rollout}).json()
        _wait(lambda: _keys(s3, "e-assigned/"))
    call = app.s3_client.put_object.call_args
    assert call.kwargs["Bucket"] == BUCKET and call.kwargs["Key"] == body["result_key"]
    assert call.kwargs["ContentType"] == "application/json"
    assert json.loads(call.kwargs["Body"])["echo"] == 4


def test_save_result_is_public(aws_env, s3) -> None:
    app = AgentCoreRLApp()
    result = {"rewards": 0.5}
    config = {"exp_id": "e-save", "input_id": "q", "s3_bucket": BUCKET}
    app.save_result(result, config, "e-save/q/s.json", payload={"p": 1})
    stored = json.loads(s3.get_object(Bucket=BUCKET, Key="e-save/q/s.json")["Body"].read())
    assert stored == {
        "rewards": 0.5, "status_code": 200, "stop_reason": "end_turn", "input_id": "q",
        "s3_bucket": BUCKET, "result_key": "e-save/q/s.json", "payload": {"p": 1},
    }  # fmt: skip
    assert result == stored  # in place, as upstream's
    with pytest.raises(ValueError, match="Missing required rollout config field: 'exp_id'"):
        app.save_result({}, {"input_id": "q", "s3_bucket": BUCKET}, "k.json")


def test_users_patch_of_the_modules_boto3(aws_env) -> None:
    # what an upstream user's test does with patch("agentcore_rl_toolkit.app.boto3")
    with mock.patch("rollhub.compat.agentcore_rl.boto3") as boto3:
        app = _app(AgentCoreRLApp, [], sync=False)
    boto3.client.assert_called_once_with("s3")
    assert app.s3_client is boto3.client.return_value
    put = threading.Event()
    app.s3_client.put_object.side_effect = lambda **kw: put.set()
    rollout = {"exp_id": "e-mock", "input_id": "q", "s3_bucket": "any-bucket"}
    with serve_app(app) as url:
        answer = httpx.post(f"{url}/invocations", json={"x": 6, "_rollout": rollout})
        assert put.wait(20)
    assert answer.json()["s3_bucket"] == "any-bucket"
    kwargs = app.s3_client.put_object.call_args.kwargs
    assert kwargs["Bucket"] == "any-bucket" and kwargs["Key"] == answer.json()["result_key"]
    assert json.loads(kwargs["Body"])["echo"] == 6


def test_unsafe_key_parts_are_refused_naming_the_field(aws_env) -> None:
    app = _app(AgentCoreRLApp, [], sync=True)
    rollout = {"exp_id": "runs/../other", "input_id": "q", "s3_bucket": BUCKET}
    with serve_app(app) as url:
        answer = httpx.post(f"{url}/invocations", json={"_rollout": rollout})
    assert answer.status_code == 400
    assert answer.json()["field"] == "_rollout.exp_id"
