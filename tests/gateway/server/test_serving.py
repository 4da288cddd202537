"""Serving modes (in process, mounted sub-app, threaded, standalone CLI) and metrics."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import urllib.request

import aiohttp
import openai
import pytest
from aiohttp import web
from rollhub.errors import ConfigError
from rollhub_gateway import cli
from rollhub_gateway.config import GatewayConfig
from rollhub_gateway.gateway import Gateway
from rollhub_gateway.http.app_server import AppServer

USER = [{"role": "user", "content": "hi"}]


async def test_mounted_as_a_sub_app(scripted, chat_model, config, ids):
    gw = Gateway(scripted, chat_model, config)
    parent = web.Application()

    async def own(_request: web.Request) -> web.Response:
        return web.Response(text="parent route")

    parent.router.add_get("/own", own)
    parent.add_subapp("/gateway", gw.app())
    server = AppServer(parent)
    root = await server.start()
    try:
        async with aiohttp.ClientSession(headers={"Authorization": "Bearer admin-secret"}) as http:
            async with http.post(root + "/gateway/sessions", json={"session_id": "m1"}) as r:
                info = await r.json()
            async with http.get(root + "/own") as r:
                assert await r.text() == "parent route"
        assert info["base_url"] == root + "/gateway/v1"
        scripted.add(ids("mounted"))
        client = openai.AsyncOpenAI(base_url=info["base_url"], api_key=info["api_key"])
        r = await client.chat.completions.create(model="m", messages=USER)
        assert r.choices[0].message.content == "mounted"
        assert gw.traces("m1")[0].turns[0].turn_index == 0
    finally:
        await server.stop()


async def test_metrics_and_turn_log(gateway, scripted, ids, caplog):
    s = gateway.open_session("s1")
    gateway.runner.log_turns = True
    scripted.add(ids("one two"))
    client = openai.AsyncOpenAI(base_url=gateway.base_url, api_key=s.key, max_retries=0)
    with caplog.at_level(logging.INFO, logger="rollhub_gateway.turns"):
        await client.chat.completions.create(model="m", messages=USER)
    line = next(r.getMessage() for r in caplog.records if r.name == "rollhub_gateway.turns")
    entry = json.loads(line.split(" ", 1)[1])
    assert entry["session_id"] == "s1" and entry["turn"] == 0 and entry["output_tokens"] == 3
    assert (
        entry["finish_reason"] == "stop" and entry["drift"] == "append" and entry["latency_ms"] > 0
    )
    with pytest.raises(openai.InternalServerError):
        await client.chat.completions.create(model="m", messages=USER)  # no script left: 502
    async with aiohttp.ClientSession() as http:
        async with http.get(gateway.url + "/metrics") as r:
            assert r.headers["Content-Type"].startswith("text/plain")
            text = await r.text()
        async with http.get(gateway.url + "/healthz") as r:
            assert (await r.json())["status"] == "ok"
        async with http.get(
            gateway.base_url + "/models", headers={"Authorization": f"Bearer {s.key}"}
        ) as r:
            assert [m["id"] for m in (await r.json())["data"]] == ["smollm2-135m-instruct"]
    lines = set(text.splitlines())
    assert 'rollhub_gateway_requests_total{route="/v1/chat/completions",status="200"} 1' in lines
    assert 'rollhub_gateway_requests_total{route="/v1/chat/completions",status="502"} 1' in lines
    assert 'rollhub_gateway_turns_total{finish_reason="stop",drift="append"} 1' in lines
    assert 'rollhub_gateway_tokens_total{kind="output"} 3' in lines
    assert "rollhub_gateway_engine_errors_total 1" in lines
    assert "rollhub_gateway_active_sessions 1" in lines
    assert 'rollhub_gateway_drift_total{kind="append"} 1' in lines
    assert any(
        x.startswith('rollhub_gateway_process_drift_total{kind="window_mismatch"}') for x in lines
    )
    assert 'rollhub_gateway_engine_latency_seconds_bucket{le="+Inf"} 1' in lines
    assert any(
        x.startswith('rollhub_gateway_turn_latency_seconds_count{route="/v1/chat/completions"}')
        for x in lines
    )


def test_models_route_through_both_sdks(threaded):
    import anthropic

    s = threaded.open_session("s1")
    assert [
        m.id for m in openai.OpenAI(base_url=threaded.base_url, api_key=s.key).models.list()
    ] == ["smollm2-135m-instruct"]
    assert [
        m.id for m in anthropic.Anthropic(base_url=threaded.url, api_key=s.key).models.list()
    ] == ["smollm2-135m-instruct"]


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_cli_config_file_and_flag_overrides(tmp_path):
    cfg = tmp_path / "gw.toml"
    cfg.write_text(
        '[gateway]\nport = 9100\nsession_ttl_s = 60\n[gateway.engine]\nname = "vllm"\noptions = { model = "served" }\n[gateway.policy]\nmax_turns = 4\n'
    )
    c = cli.build_config(
        _args("serve", "--config", str(cfg), "--engine-option", "base_url=http://127.0.0.1:9")
    )
    assert (c.port, c.session_ttl_s, c.policy.max_turns) == (9100, 60, 4)
    assert c.engine.name == "vllm" and c.engine.options == {
        "model": "served",
        "base_url": "http://127.0.0.1:9",
    }
    c = cli.build_config(
        _args("serve", "--config", str(cfg), "--engine", "scripted", "--port", "0")
    )
    assert (c.engine.name, c.engine.options, c.port) == ("scripted", {}, 0)
    assert cli.build_config(_args("serve")).port == cli.DEFAULT_PORT
    cfg.write_text("prot = 1\n")
    with pytest.raises(ConfigError, match="unknown key 'prot'"):
        cli.build_config(_args("serve", "--config", str(cfg)))


def test_standalone_serve_until_sigterm(tmp_path, tokenizer):
    """``rollhub gateway serve`` in its own process: prints its URL, serves, stops on SIGTERM."""
    model_dir = tmp_path / "smollm2-tokenizer"  # a saved fast tokenizer loads in well under 1 s
    tokenizer.save_pretrained(model_dir)
    argv = [
        "gateway",
        "serve",
        "--engine",
        "scripted",
        "--port",
        "0",
        "--admin-token",
        "tok",
        "--model",
        str(model_dir),
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "rollhub.cli", *argv],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    try:
        line = proc.stdout.readline()
        assert f"serving {model_dir} at http://127.0.0.1:" in line, proc.stderr.read()
        url = line.split(" at ")[1].split(" ")[0]
        req = urllib.request.Request(
            url + "/sessions", data=b"{}", headers={"Authorization": "Bearer tok"}, method="POST"
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 201 and json.loads(r.read())["base_url"] == url + "/v1"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_threaded_gateway_requires_start(chat_model):
    from rollhub.errors import UsageError
    from rollhub_gateway.engines.scripted import ScriptedBackend
    from rollhub_gateway.http.serving import ThreadedGateway

    tg = ThreadedGateway(Gateway(ScriptedBackend(), chat_model, GatewayConfig()))
    with pytest.raises(UsageError):
        tg.open_session("x")
    with tg:
        assert tg.url.startswith("http://127.0.0.1:") and tg.open_session("x").key.startswith("rh-")
    assert tg.url is None


def test_conformance_subcommand_forwards_its_options(monkeypatch):
    from rollhub_gateway import conformance

    seen = []
    monkeypatch.setattr(conformance, "main", lambda argv: seen.append(argv) or 1)
    assert (
        cli.run(_args("conformance", "--family", "smollm2", "--family", "qwen3", "--markdown")) == 1
    )
    assert cli.run(_args("conformance", "--via", "http")) == 1
    assert seen == [
        ["--family=smollm2", "--family=qwen3", "--via=both", "--markdown"],
        ["--via=http"],
    ]
