"""The two gateways of ``bench_gateway_reference.py``, each served from its own process.

``python bench_gateway_servers.py rollhub TOKENIZER_DIR`` (the project's environment) or
``python bench_gateway_servers.py reference TOKENIZER_DIR`` (the reference's environment,
``agentcore-rl-toolkit[gateway]==0.1.4``) serves one gateway on 127.0.0.1 and prints
``READY <url> <pid>`` on stdout; it stops when stdin closes.

Both load the same tokenizer directory (SmolLM2's tokenizer with TRL's ``qwen2_5.jinja``
as its chat template, written by the driver) and both answer every prompt, after 0 ms,
with the same tool call (:data:`OUTPUT_TEXT`, 32 ids) and the same logprobs. This module
imports neither gateway at import time: the driver reads the workload from it.

Admin routes: rollhub serves its own (``POST /sessions``, ``POST /sessions/{sid}/finish``).
The reference has sessions only in process, so its server adds ``POST /bench/open`` and
``POST /bench/finish`` (JSON ``{"sid": ...}``) calling ``create_session`` /
``finish_session``; the session id is its api key.

With ``BENCH_GATEWAY_PROFILE=PATH`` in the environment the server process runs under
:mod:`cProfile` and writes its profile to ``PATH`` when it stops (e.g. ``--only rollhub``).
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

#: the tool call the scripted engine samples every turn (exactly as qwen2_5.jinja renders it)
OUTPUT_TEXT = (
    '<tool_call>\n{"name": "search_docs", "arguments": {"query": "retries"}}'
    "\n</tool_call><|im_end|>"
)
ADMIN_TOKEN = "bench"

SYSTEM = (
    "You are a careful research assistant working inside a documentation tool. Answer the "
    "user's questions about the rollout system by searching the documentation, reading the "
    "pages you find, and running small shell commands when a question is about the files on "
    "disk. Always call a tool before answering; never guess an option name or a default. "
    "Quote the exact option names you found and cite the page for each fact."
)


def _tool(name: str, description: str, props: dict[str, Any], required: list[str]) -> dict:
    params = {"type": "object", "properties": props, "required": required}
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": params},
    }


TOOLS = [
    _tool(
        "search_docs",
        "Search the documentation and return the best matching pages with a short excerpt.",
        {
            "query": {"type": "string", "description": "keywords to search for"},
            "limit": {"type": "integer", "description": "how many pages to return (1-20)"},
            "section": {
                "type": "string",
                "enum": ["guide", "reference", "operations", "changelog"],
                "description": "restrict the search to one part of the documentation",
            },
        },
        ["query"],
    ),
    _tool(
        "read_page",
        "Read one documentation page, optionally only the lines of one heading.",
        {
            "path": {"type": "string", "description": "the page's path, as search_docs gives it"},
            "heading": {"type": "string", "description": "only this heading's section"},
        },
        ["path"],
    ),
    _tool(
        "run_shell",
        "Run a read-only shell command in the project checkout and return its output.",
        {
            "command": {"type": "string", "description": "the command line to run"},
            "timeout_s": {"type": "number", "description": "seconds before it is stopped"},
        },
        ["command"],
    ),
]


def first_messages() -> list[dict[str, Any]]:
    """The conversation an agent sends on its first turn."""
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "How many times does a rollout worker retry a failed call?"},
    ]


def tool_result(turn: int) -> str:
    """The tool's answer after turn ``turn`` (a few tokens, different every turn)."""
    return f"#{turn}: {turn % 5 + 2}"


def output_logprobs(n: int) -> list[float]:
    """The logprobs the scripted engine reports for its ``n`` output ids."""
    return [-((i * 7919 + 13) % 1000) / 997.0 - 0.001 for i in range(n)]


# rollhub ---------------------------------------------------------------------------------------


async def _serve_rollhub(tok_dir: str) -> Any:
    from rollhub.sampling import Generation, SamplingBackend
    from rollhub_gateway.chat_model import build_chat_model
    from rollhub_gateway.config import GatewayConfig
    from rollhub_gateway.gateway import Gateway
    from rollhub_gateway.http.serving import settle_heap
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tok_dir)
    out = tok.encode(OUTPUT_TEXT, add_special_tokens=False)
    lps = output_logprobs(len(out))

    class FixedEngine(SamplingBackend):
        name = "bench-fixed"

        async def generate(self, prompt_ids: Any, params: Any, *, turn: Any = None) -> Any:
            return Generation(list(out), list(lps), "stop")

    model = build_chat_model(
        "smollm2-135m-instruct", chat_template=tok.chat_template, family="hermes", tokenizer=tok
    )
    cfg = GatewayConfig(
        admin_token=ADMIN_TOKEN, log_turns=False, policy={"max_concurrent_requests": 4}
    )
    gw = Gateway(FixedEngine(), model, cfg)
    url = await gw.start("127.0.0.1", 0)
    settle_heap()  # as the standalone server (serve_forever) does once it serves
    return url, gw.close


# the reference ---------------------------------------------------------------------------------


async def _serve_reference(tok_dir: str) -> Any:
    from agentcore_rl_toolkit.rollout_gateway import (
        HfTemplateRenderer,
        RolloutGateway,
        ThreadedGatewayServer,
    )
    from agentcore_rl_toolkit.rollout_gateway.trajectory import TurnRecord
    from aiohttp import web
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tok_dir)
    out = tok.encode(OUTPUT_TEXT, add_special_tokens=False)
    lps = output_logprobs(len(out))

    class FixedEngine:
        async def generate(
            self, *, prompt_ids: Any, sampling_params: Any, session_id: Any = None,
            image_data: Any = None, video_data: Any = None,
        ) -> Any:  # fmt: skip
            return TurnRecord(list(prompt_ids), list(out), "stop", list(lps))

    gw = RolloutGateway(backend=FixedEngine(), renderer=HfTemplateRenderer(tok), tokenizer=tok)

    async def open_(request: web.Request) -> web.Response:
        gw.create_session((await request.json())["sid"])
        return web.json_response({"ok": True})

    async def finish(request: web.Request) -> web.Response:
        records = await gw.finish_session((await request.json())["sid"])
        sampled = sum(sum(r.loss_mask) for r in records)
        return web.json_response({"records": len(records), "sampled": sampled})

    gw.app.router.add_post("/bench/open", open_)
    gw.app.router.add_post("/bench/finish", finish)
    server = ThreadedGatewayServer(gw, host="127.0.0.1", port=0)
    server.start()

    async def close() -> None:
        server.shutdown()

    return f"http://127.0.0.1:{server.port}", close


async def _main(which: str, tok_dir: str) -> None:
    serve = _serve_rollhub if which == "rollhub" else _serve_reference
    url, close = await serve(tok_dir)
    print(f"READY {url} {os.getpid()}", flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)  # the driver closes stdin to stop us
    await close()


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("rollhub", "reference"):
        sys.exit("usage: bench_gateway_servers.py rollhub|reference TOKENIZER_DIR")
    profile_to = os.environ.get("BENCH_GATEWAY_PROFILE")  # a cProfile of the gateway process
    if profile_to:
        import cProfile

        cProfile.run("asyncio.run(_main(sys.argv[1], sys.argv[2]))", profile_to)
    else:
        asyncio.run(_main(sys.argv[1], sys.argv[2]))
