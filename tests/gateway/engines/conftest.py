"""Fixtures of the sampling-backend tests.

- ``smollm``: the real SmolLM2-135M-Instruct transformers engine, loaded once per session.
- ``vllm_server`` / ``sglang_server``: loopback aiohttp servers speaking vLLM's
  ``/v1/completions`` (token-id prompt, ``return_token_ids``) and SGLang's ``/generate``
  wire formats, with deterministic tokens, per-token delays, error injection and a record
  of requests, disconnects and aborts.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from rollhub_gateway.engines.transformers_engine import TransformersBackend, TransformersOptions


@pytest.fixture(scope="session")
def smollm() -> Iterator[TransformersBackend]:
    """The embedded engine with the real SmolLM2 model (≈12-30 s to load)."""
    backend = TransformersBackend(TransformersOptions(max_batch_size=8, threads=1))
    backend._load()  # synchronous on purpose: the worker thread serves any test's loop
    yield backend
    assert backend.engine is not None
    backend.engine.stop()


@pytest.fixture(scope="session")
def chat_ids(smollm: TransformersBackend) -> Callable[[str], list[int]]:
    """Render one user message as token ids with the model's own chat template."""

    def render(text: str) -> list[int]:
        ids = smollm.tokenizer.apply_chat_template(
            [{"role": "user", "content": text}],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
        return list(ids)

    return render


# -- fake engines ---------------------------------------------------------------------------


def fake_token(prompt: list[int], i: int) -> int:
    """The i-th token the fake engines produce for ``prompt``."""
    return (sum(prompt) * 7 + 13 * i) % 1000 + 5


def fake_logprob(i: int) -> float:
    return -0.01 * (i + 1)


def fake_alternatives(i: int, t: int, k: int) -> list[tuple[int, float]]:
    """``k`` alternatives at position ``i``: the sampled ``t`` first, then ``t+1…`` each
    one nat less likely (what both fakes report when asked for top logprobs)."""
    return [(t + j, fake_logprob(i) - j) for j in range(k)]


def vllm_top(i: int, t: int, k: int) -> dict[str, float]:
    """vLLM's per-token ``{token text: logprob}`` map (the fake spells text as ``<id>``)."""
    return {f"<{a}>": lp for a, lp in fake_alternatives(i, t, max(k, 1))}


@dataclass
class FakeEngine:
    """State of a loopback engine server."""

    url: str = ""
    delay_s: float = 0.0
    fail_status: int | None = None
    incremental: bool = False  # SGLang --incremental-streaming-output
    requests: list[dict[str, Any]] = field(default_factory=list)
    produced: int = 0
    disconnects: int = 0
    aborted_rids: list[str] = field(default_factory=list)
    error_after: int | None = None  # stream an engine error event after this many tokens
    headers: list[dict[str, str]] = field(default_factory=list)
    finished_streams: int = 0

    def plan(
        self, prompt: list[int], max_tokens: int, stop_ids: list[int]
    ) -> tuple[list[int], str]:
        ids: list[int] = []
        for i in range(max_tokens):
            ids.append(fake_token(prompt, i))
            if ids[-1] in stop_ids:
                return ids, "stop"
        return ids, "length"


async def _sse(resp: web.StreamResponse, obj: Any) -> None:
    data = obj if isinstance(obj, str) else json.dumps(obj)
    await resp.write(f"data: {data}\n\n".encode())


def vllm_app(state: FakeEngine) -> web.Application:
    """vLLM's ``POST /v1/completions`` for token-id prompts with ``return_token_ids``."""

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        state.requests.append(body)
        state.headers.append(dict(request.headers))
        if state.fail_status:
            return web.json_response(
                {"error": {"message": "boom", "type": "InternalServerError", "code": 500}},
                status=state.fail_status,
            )
        prompt = body["prompt"]
        if not (isinstance(prompt, list) and all(isinstance(t, int) for t in prompt)):
            return web.json_response({"error": {"message": "prompt"}}, status=400)
        ids, finish = state.plan(prompt, body.get("max_tokens", 16), body.get("stop_token_ids", []))
        base = {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "created": int(time.time()),
            "model": body["model"],
        }
        if not body.get("stream"):
            state.produced += len(ids)
            return web.json_response(
                {
                    **base,
                    "object": "text_completion",
                    "choices": [
                        {
                            "index": 0,
                            "text": "".join(f"<{t}>" for t in ids),
                            "logprobs": {
                                "text_offset": list(range(len(ids))),
                                "token_logprobs": [fake_logprob(i) for i in range(len(ids))],
                                "tokens": [f"<{t}>" for t in ids],
                                "top_logprobs": [
                                    vllm_top(i, t, body.get("logprobs") or 1)
                                    for i, t in enumerate(ids)
                                ],
                            },
                            "finish_reason": finish,
                            "stop_reason": ids[-1] if finish == "stop" else None,
                            "prompt_token_ids": prompt if body.get("return_token_ids") else None,
                            "token_ids": ids if body.get("return_token_ids") else None,
                        }
                    ],
                    "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(ids)},
                }
            )
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        try:
            for i, t in enumerate(ids):
                if state.delay_s:
                    await asyncio.sleep(state.delay_s)
                if i == state.error_after:
                    await _sse(resp, {"error": {"message": "engine died", "code": 500}})
                    return resp
                last = i == len(ids) - 1
                await _sse(
                    resp,
                    {
                        **base,
                        "object": "text_completion",
                        "choices": [
                            {
                                "index": 0,
                                "text": f"<{t}>",
                                "logprobs": {
                                    "text_offset": [i],
                                    "token_logprobs": [fake_logprob(i)],
                                    "tokens": [f"<{t}>"],
                                    "top_logprobs": [vllm_top(i, t, body.get("logprobs") or 1)],
                                },
                                "finish_reason": finish if last else None,
                                "stop_reason": None,
                                "token_ids": [t],
                                **({"prompt_token_ids": prompt} if i == 0 else {}),
                            }
                        ],
                    },
                )
                state.produced += 1
            await _sse(
                resp,
                {
                    **base,
                    "object": "text_completion",
                    "choices": [],
                    "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(ids)},
                },
            )
            await _sse(resp, "[DONE]")
            state.finished_streams += 1
        except (ConnectionResetError, ConnectionError):
            state.disconnects += 1
        return resp

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    return app


def sglang_app(state: FakeEngine) -> web.Application:
    """SGLang's ``POST /generate`` (input_ids, return_logprob) and ``POST /abort_request``."""

    def meta(
        rid: str, prompt: list[int], ids: list[int], finish: Any, start: int, top: int = 0
    ) -> dict[str, Any]:
        extra = {}
        if top:
            extra["output_top_logprobs"] = [
                [[lp, a, None] for a, lp in fake_alternatives(i, t, top)] for i, t in enumerate(ids)
            ][start:]
        return {
            **extra,
            "id": rid,
            "finish_reason": finish,
            "prompt_tokens": len(prompt),
            "completion_tokens": len(ids),
            "cached_tokens": 0,
            "weight_version": "7",
            "output_token_logprobs": [[fake_logprob(i), t, None] for i, t in enumerate(ids)][
                start:
            ],
        }

    async def generate(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        state.requests.append(body)
        state.headers.append(dict(request.headers))
        if state.fail_status:
            return web.json_response({"error": {"message": "boom"}}, status=state.fail_status)
        prompt, sp, rid = body["input_ids"], body["sampling_params"], body.get("rid", "")
        ids, kind = state.plan(prompt, sp.get("max_new_tokens", 128), sp.get("stop_token_ids", []))
        finish = (
            {"type": kind, "matched": ids[-1]}
            if kind == "stop"
            else {"type": kind, "length": len(ids)}
        )
        if not body.get("stream"):
            state.produced += len(ids)
            return web.json_response(
                {
                    "text": "",
                    "output_ids": ids,
                    "meta_info": meta(rid, prompt, ids, finish, 0, body.get("top_logprobs_num", 0)),
                }
            )
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        try:
            for i in range(len(ids)):
                if state.delay_s:
                    await asyncio.sleep(state.delay_s)
                if i == state.error_after:
                    await _sse(resp, {"error": {"message": "engine died"}})
                    return resp
                if rid in state.aborted_rids:
                    break
                done = finish if i == len(ids) - 1 else None
                start = i if state.incremental else 0
                await _sse(
                    resp,
                    {
                        "text": "",
                        "output_ids": ids[start : i + 1],
                        "meta_info": meta(
                            rid, prompt, ids[: i + 1], done, start, body.get("top_logprobs_num", 0)
                        ),
                    },
                )
                state.produced += 1
            await _sse(resp, "[DONE]")
            state.finished_streams += 1
        except (ConnectionResetError, ConnectionError):
            state.disconnects += 1
        return resp

    async def abort_request(request: web.Request) -> web.Response:
        body = await request.json()
        state.aborted_rids.append(body.get("rid", ""))
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/generate", generate)
    app.router.add_post("/abort_request", abort_request)
    return app


async def serve(app: web.Application, port: int = 0) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    sock = site._server.sockets[0]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{sock.getsockname()[1]}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Bound at import: several test folders have a conftest.py, and "conftest" in sys.modules
# names whichever was imported last.
_THIS_MODULE = sys.modules[__name__]


@pytest.fixture(scope="session")
def fakes() -> Any:
    """This module: the fake-engine builders, for tests that assemble their own server."""
    return _THIS_MODULE


@pytest.fixture
async def vllm_server() -> AsyncIterator[FakeEngine]:
    state = FakeEngine()
    runner, state.url = await serve(vllm_app(state))
    yield state
    await runner.cleanup()


@pytest.fixture
async def sglang_server() -> AsyncIterator[FakeEngine]:
    state = FakeEngine()
    runner, state.url = await serve(sglang_app(state))
    yield state
    await runner.cleanup()
