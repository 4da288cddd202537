"""The gateway as the upstream engine of a real ``rllm-model-gateway`` (run as its own
process on loopback): the proxy records, from the gateway's vLLM-style fields, exactly the
prompt ids the engine got and the ids and logprobs it sampled, streamed or not."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any

import aiohttp
import pytest
from rollhub_gateway.engines.scripted import scripted_logprob

USER = [{"role": "user", "content": "What is the weather in Paris?"}]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
async def rllm(gateway, tmp_path):
    """``python -m rllm_model_gateway`` with the gateway as its only worker."""
    # the probed port can be bound by another test's process before the child binds it:
    # a child that exits for that is started again on another port
    for attempt in range(3):
        port = _free_port()
        proc, log = _launch(tmp_path, gateway.base_url, port)
        url = f"http://127.0.0.1:{port}"
        try:
            if await _healthy(proc, url, tmp_path / "rllm.log"):
                yield url
                return
            assert attempt < 2, "rllm-model-gateway lost its port three times"
        finally:
            _stop(proc)
            log.close()


def _launch(tmp_path, worker_url: str, port: int) -> tuple[subprocess.Popen, Any]:
    config = {
        "host": "127.0.0.1", "port": port, "store_worker": "memory", "sync_traces": True,
        "health_check_interval": 0.1, "log_level": "WARNING",
        "workers": [{"url": worker_url, "worker_id": "0"}],
    }  # fmt: skip
    path = tmp_path / "rllm.yaml"
    path.write_text(json.dumps(config))  # JSON is valid YAML
    log = (tmp_path / "rllm.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "rllm_model_gateway", "--config", str(path),
         "--host", "127.0.0.1", "--port", str(port), "--store", "memory"],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "NO_PROXY": "*"},
    )  # fmt: skip
    return proc, log


async def _healthy(proc: subprocess.Popen, url: str, log_path) -> bool:
    """True once it answers; False if it exited because its port was taken."""
    async with aiohttp.ClientSession() as http:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                text = log_path.read_text()
                assert "address already in use" in text.lower(), text[-2000:]
                return False
            assert time.monotonic() < deadline, "rllm-model-gateway did not start"
            try:
                async with http.get(url + "/health") as r:
                    if r.status == 200:
                        return True
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)


def _stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


async def test_rllm_model_gateway_records_the_gateways_token_ids(gateway, scripted, ids, rllm):
    s = gateway.open_session("s1")
    outs = [ids("Sunny in Paris."), ids("It is 20 degrees and sunny in Paris today.")]
    scripted.add(*outs)
    headers = {"Authorization": f"Bearer {s.key}"}  # passed through to the gateway
    url = f"{rllm}/sessions/r1/v1/chat/completions"
    async with aiohttp.ClientSession(headers=headers) as http:
        async with http.post(url, json={"model": "m", "messages": USER}) as r:
            assert r.status == 200, await r.text()
            plain = await r.json()
        assert plain["choices"][0]["message"]["content"] == "Sunny in Paris."
        assert "prompt_token_ids" not in plain  # the proxy strips vLLM's fields again
        await asyncio.sleep(0.5)  # its worker health checks hit /health meanwhile
        history = [*USER, {"role": "assistant", "content": "Sunny in Paris."},
                   {"role": "user", "content": "And the temperature?"}]  # fmt: skip
        async with http.post(url, json={"model": "m", "messages": history, "stream": True}) as r:
            assert r.status == 200, await r.text()
            await r.read()
        deadline = time.monotonic() + 10
        while True:  # streamed traces are written after the stream ends
            async with http.get(f"{rllm}/sessions/r1/traces") as r:
                traces = await r.json()
            if len(traces) == 2 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
    assert len(traces) == 2
    for trace, prompt, out in zip(traces, scripted.prompts, outs, strict=True):
        assert trace["prompt_token_ids"] == prompt
        assert trace["completion_token_ids"] == out
        assert trace["logprobs"] == [scripted_logprob(i, t) for i, t in enumerate(out)]
    # the gateway's own record holds the same ids: one session, two appended turns
    (rec,) = gateway.traces("s1")
    assert [t.drift for t in rec.turns] == ["append", "append"]
    assert rec.prompt_ids == scripted.prompts[0]
