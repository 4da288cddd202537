"""``[store] url = "agentcore-rl+s3://bucket"``: a hub runs an unmodified upstream agent
on the ``agentcore`` runtime (through the local data plane), outcomes exact."""

from __future__ import annotations

import importlib

import pytest
from rollhub.compat import plugin as compat_plugin
from rollhub.compat.agentcore_local import runtime_arn
from rollhub.compat.upstream_layout import from_upstream_document
from rollhub.errors import ConfigError
from rollhub.stores import open_store
from rollhub.testing.hub import make_host, make_hub
from rollhub.testing.servers import serve_app

from tests.compat.loopback_aws import BUCKET

ARN = runtime_arn("upstream_hub")


@pytest.fixture
def upstream_app(plane):
    module = importlib.import_module("tests.compat.upstream_math_agent")
    with serve_app(module.app) as url:
        plane.app.add_runtime(ARN, url)
        yield url


async def test_hub_runs_upstream_agent_from_config(upstream_app, tmp_path) -> None:
    config = {
        "experiment": {"name": "hub-upstream", "n_samples": 2, "timeout_s": 60,
                       "output_dir": str(tmp_path), "progress": False,
                       "sampling": {"temperature": 0.25}},
        "runtime": {"name": "agentcore", "runtime_arn": ARN},
        "store": {"url": f"agentcore-rl+s3://{BUCKET}"},
    }  # fmt: skip
    hub = make_hub(config, compat_plugin, run_dir=tmp_path / "run")
    async with hub:
        good = await hub.run_group({"id": "q1", "a": 2, "b": 3, "answer": 5})
        bad = await hub.run_group({"id": "q2", "a": 0, "b": 0, "answer": 0, "fail": "v"}, n=1)
    assert [e.status for e in good.episodes] == ["ok", "ok"]
    assert [e.reward for e in good.episodes] == [1.0, 1.0]
    assert [e.result["temperature_seen"] for e in good.episodes] == [0.25, 0.25]
    # hub session ids are short: the runtime lengthened them and the store found the file
    assert all(e.result["session_seen"] != e.session_id for e in good.episodes)
    [failed] = bad.episodes
    assert failed.status == "agent_error"
    assert (failed.error.type, failed.error.message) == ("ValueError", "bad input v")


def test_scheme_is_registered_and_prefixes_refused(aws_env) -> None:
    host = make_host(compat_plugin)
    store = open_store(f"agentcore-rl+s3://{BUCKET}", host)
    assert isinstance(store, compat_plugin.UpstreamS3Store)
    assert store.url == f"s3://{BUCKET}" and store.bucket == BUCKET
    with pytest.raises(ConfigError, match="without a prefix"):
        open_store(f"agentcore-rl+s3://{BUCKET}/runs", host)


@pytest.mark.parametrize(
    ("doc", "status", "error_type"),
    [
        ({"status_code": 200, "rewards": 1.0}, "ok", None),
        ({"status_code": 500, "stop_reason": "x", "traceback": "Traceback...\nKeyError: 'a'"},
         "error", "KeyError"),
        ({"status_code": "oops", "stop_reason": "?"}, "error", "AgentError"),
    ],
)  # fmt: skip
def test_upstream_documents_gain_a_status(doc, status, error_type) -> None:
    meta = from_upstream_document(doc)["_rollhub"]
    assert meta["status"] == status
    assert (meta["error"] or {}).get("type") == error_type


def test_rollhub_documents_pass_through() -> None:
    doc = {"rewards": 1.0, "status_code": 500, "_rollhub": {"status": "ok"}}
    assert from_upstream_document(doc) is doc
