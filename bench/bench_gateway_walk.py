"""The walk of one gateway model call: the gateway functions a non-streamed Chat
Completions call enters from ``ModelRoutes._model_call``, in order, with their files, and the
times it enters a file it had already left (``docs/architecture.md``).

Reproduce::

    .venv/bin/python bench/bench_gateway_walk.py [--depth 2]

``--depth`` counts file changes below ``_model_call``: 1 lists the pipeline's stages, 2
also what each stage calls in another file. Calls within one file, constructors and
generated code (dataclass methods, lambdas) are not stops. The second call of a session
is traced (the first one warms the caches).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import aiohttp
import rollhub_gateway
from rollhub_gateway.chat_model import build_chat_model
from rollhub_gateway.engines.scripted import ScriptedBackend
from rollhub_gateway.gateway import Gateway

PKG = str(Path(rollhub_gateway.__file__).parent)


class Walk:
    """Stops of the calls below one ``_model_call`` frame, up to ``depth`` file changes."""

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self.base: FrameType | None = None
        self.stops: list[tuple[int, str, str]] = []

    def __call__(self, frame: FrameType, event: str, _arg: Any) -> None:
        code = frame.f_code
        if event != "call" or not code.co_filename.startswith(PKG):
            return
        if code.co_name == "_model_call":
            self.base = frame
        if self.base is None or code.co_name.startswith("<") or code.co_name == "__init__":
            return
        d = 0
        f: FrameType | None = frame
        while f is not None and f is not self.base:
            back = f.f_back
            if back is not None and back.f_code.co_filename != f.f_code.co_filename:
                d += 1
            f = back
        caller = frame.f_back.f_code.co_filename if frame.f_back else ""
        if f is None or d > self.depth or (d and caller == code.co_filename):
            return
        self.stops.append((d, code.co_qualname, code.co_filename[len(PKG) + 1 :]))

    def report(self) -> str:
        seen: list[str] = []
        left, back, lines = None, 0, []
        for d, name, fname in self.stops:
            again = fname in seen and fname != left
            back += again
            lines.append(f"{'  ' * d}{name} — {fname}{'   <- back' if again else ''}")
            seen += [] if fname in seen else [fname]
            left = fname
        lines.append(
            f"{len(self.stops)} stops in {len(seen)} files, {back} returns to a file already left"
        )
        return "\n".join(lines)


async def walk(depth: int) -> str:
    model = build_chat_model()
    ids = [*model.renderer.tokenizer.encode("Hello there"), model.stop_token_ids()[0]]
    gateway = Gateway(ScriptedBackend(script=[ids, ids]), model)
    url = await gateway.start("127.0.0.1", 0)
    key = gateway.open_session("s1").key
    tracer = Walk(depth)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    try:
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {key}"}) as http:
            for traced in (False, True):
                sys.setprofile(tracer if traced else None)
                async with http.post(f"{url}/v1/chat/completions", json=body) as r:
                    await r.read()
                sys.setprofile(None)
    finally:
        await gateway.close()
    return tracer.report()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--depth", type=int, default=2)
    print(asyncio.run(walk(parser.parse_args().depth)))
