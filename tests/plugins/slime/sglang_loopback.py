"""A loopback server speaking SGLang's native ``POST /generate`` (token ids in;
``meta_info.output_token_logprobs``, ``finish_reason``, ``weight_version`` out) whose tokens
come from the gateway's scripted engine, driven by :class:`Script`, a rule on the decoded
prompt.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from rollhub.lifetimes.loop_thread import LoopThread
from rollhub.sampling import SamplingParams
from rollhub_gateway.engines.scripted import ScriptedBackend


@dataclass
class SGLangState:
    """What the loopback server saw and how it answers."""

    url: str = ""
    weight_version: str = "3"
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    abort_marker: str | None = None  # prompts containing it end with finish_reason abort


def sglang_app(state: SGLangState, engine: ScriptedBackend, decode: Callable) -> web.Application:
    """SGLang's ``POST /generate`` in front of the scripted engine."""

    async def generate(request: web.Request) -> web.Response:
        body = await request.json()
        state.requests.append(body)
        state.headers.append(dict(request.headers))
        prompt, sp = body.get("input_ids"), body.get("sampling_params") or {}
        if not (isinstance(prompt, list) and all(isinstance(t, int) for t in prompt)):
            return web.json_response({"error": {"message": "input_ids required"}}, status=400)
        if body.get("stream") or body.get("return_logprob") is not True:
            return web.json_response({"error": {"message": "unsupported request"}}, status=400)
        params = SamplingParams(
            max_tokens=sp.get("max_new_tokens", 128), temperature=sp.get("temperature", 1.0)
        )
        gen = await engine.generate(prompt, params)
        ids, lps = gen.token_ids, gen.logprobs
        if gen.finish_reason == "length":
            finish: dict[str, Any] = {"type": "length", "length": len(ids)}
        else:
            finish = {"type": "stop", "matched": ids[-1] if ids else None}
        if state.abort_marker and state.abort_marker in decode(prompt):
            ids, lps = ids[:3], lps[:3]
            finish = {"type": "abort", "message": "aborted by the router"}
        meta = {
            "id": body.get("rid"),
            "finish_reason": finish,
            "prompt_tokens": len(prompt),
            "completion_tokens": len(ids),
            "cached_tokens": 0,
            "weight_version": state.weight_version,
            "output_token_logprobs": [[lp, t, None] for lp, t in zip(lps, ids, strict=True)],
            "e2e_latency": 0.001,
        }
        return web.json_response({"text": decode(ids), "output_ids": ids, "meta_info": meta})

    app = web.Application()
    app.router.add_post("/generate", generate)
    return app


class Script:
    """The scripted model: what it says depends on the marker in the user's question."""

    def __init__(self, tokenizer: Any) -> None:
        self.tok = tokenizer
        self.end = tokenizer.convert_tokens_to_ids("<|im_end|>")

    def text(self, text: str, *, end: bool = True) -> list[int]:
        ids = self.tok.encode(text, add_special_tokens=False)
        return [*ids, self.end] if end else ids

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids)

    def respond(self, prompt_ids: list[int]) -> list[int]:
        prompt = self.decode(prompt_ids)
        if "Summary so far" in prompt:
            return self.text("Final answer: 5")
        if "[tool]" in prompt and "<|im_start|>tool" not in prompt:
            return self.text(
                '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
            )
        if "[tool]" in prompt:
            return self.text("The sum is 5.")
        if "[long]" in prompt:
            return self.text(" ".join(["five"] * 200), end=False)
        return self.text("The answer is 5.")


@contextlib.contextmanager
def serve_sglang(script: Script) -> Iterator[SGLangState]:
    """Serve the loopback SGLang server on its own loop thread for the block."""
    engine = ScriptedBackend(script=[script.respond] * 1000)
    state = SGLangState()
    thread = LoopThread("sglang-loopback")

    async def start() -> web.AppRunner:
        runner = web.AppRunner(sglang_app(state, engine, script.decode))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        state.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        return runner

    runner = thread.run(start())
    try:
        yield state
    finally:
        thread.run(runner.cleanup())
        thread.stop()
