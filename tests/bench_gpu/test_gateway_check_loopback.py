"""The gateway-vs-vllm check end to end without a GPU: the real ``rollhub gateway serve``
(``--engine vllm``) in front of a loopback server speaking vLLM's ``/v1/completions`` wire
format, started and stopped by the check itself. Only vLLM is stood in for."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from gpucheck import checks
from gpucheck.procs import free_port

FAKE_VLLM = """
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SKEW = float(sys.argv[2])  # added to the logprobs of requests the gateway did not send


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.reply(200 if self.path == "/health" else 404, {})

    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        assert req["return_token_ids"] is True and req["temperature"] == 0.0, req
        prompt, n = req["prompt"], min(int(req["max_tokens"]), 6)
        ids = [(prompt[-1] + 7 * k) % 900 + 30 for k in range(n)]
        lps = [-0.125 * (k + 1) for k in range(n)]
        if "top_p" not in req:  # the check's direct request (the gateway always sends top_p)
            lps = [x + SKEW for x in lps]
        choice = {"index": 0, "text": "", "token_ids": ids, "finish_reason": "length",
                  "logprobs": {"token_logprobs": lps, "tokens": [""] * n}}
        self.reply(200, {"id": "cmpl-1", "choices": [choice], "usage": {}})


ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    """SmolLM2's tokenizer and a config: all the gateway reads of a model it does not run."""
    from rollhub_gateway.models import SMOLLM2, load_tokenizer

    path = tmp_path_factory.mktemp("smollm2")
    load_tokenizer(SMOLLM2).save_pretrained(path)
    config = {"model_type": "llama", "max_position_embeddings": 8192}
    (path / "config.json").write_text(json.dumps(config))
    return path


@pytest.mark.parametrize("skew", [0.0, 1e-3])
def test_gateway_check_compares_the_recorded_tokens_with_direct_requests(
    skew, model_dir, tmp_path, monkeypatch
):
    fake = tmp_path / "fake_vllm.py"
    fake.write_text(FAKE_VLLM)
    monkeypatch.setattr(
        checks, "vllm_argv", lambda ctx, port: [sys.executable, str(fake), str(port), str(skew)]
    )
    ctx = checks.Context(
        venv=Path(sys.executable).parent.parent, work=tmp_path / "work", model=str(model_dir),
        port=free_port(),
    )  # fmt: skip
    result = checks.run_check("gateway-vs-vllm", ctx, time.monotonic() + 120)
    assert result.figures.get("prompts") == len(checks.PROMPTS), result
    assert result.figures["tokens"] == 6 * len(checks.PROMPTS)
    assert result.figures["id_mismatches"] == 0
    if skew == 0.0:
        assert result.status == "pass", result
        assert result.figures["max_abs_dlogprob"] == 0.0
    else:
        assert result.status == "fail", result
        assert result.figures["max_abs_dlogprob"] == pytest.approx(1e-3)
    # it was the real gateway, on the vllm engine, that recorded the tokens
    assert "rollhub gateway serving" in (ctx.work / "gateway.log").read_text()
