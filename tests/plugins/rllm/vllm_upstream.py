"""A vLLM-style upstream made of a real rollhub gateway, for rllm-model-gateway to record.

rllm-model-gateway reads token ids only from vLLM's response fields: the root
``prompt_token_ids`` and each choice's ``token_ids`` (vLLM >= 0.11 with
``return_token_ids``), next to the standard ``logprobs.content``. The rollhub gateway's
OpenAI route returns the logprobs (with a ``token_id`` per entry) but not those two fields,
so this relay adds them: each call runs in a fresh one-turn gateway session, whose record
holds exactly the prompt ids the engine was given and the ids and logprobs it sampled.
Streams are buffered and replayed with ``prompt_token_ids`` on the first chunk and the
sampled ids on the chunk that carries the logprobs, as vLLM sends them.

It runs on the gateway's own event loop (``ThreadedGateway.call``), so it may use the
gateway's in-process API directly. It also answers ``/health`` as vLLM does, for the
gateway's worker health checks.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from aiohttp import ClientSession, web
from rollhub_gateway.server import Gateway
from rollhub_gateway.serving import AppServer


class VllmStyleUpstream:
    """Serves ``/v1/chat/completions`` and ``/health`` in front of ``gateway``."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        #: request bodies as rllm-model-gateway forwarded them
        self.requests: list[dict[str, Any]] = []
        #: per call: (prompt ids, sampled ids, logprobs) as the engine produced them
        self.calls: list[tuple[list[int], list[int], list[float]]] = []
        #: calls answered with a 200 that is not JSON (no trace can be built from it)
        self.garble_next = 0
        self._server: AppServer | None = None
        self._http: ClientSession | None = None
        self.url: str | None = None

    async def start(self) -> str:
        """Serve on the running loop (the gateway's); returns the root URL."""
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/health", self._health)
        self._server = AppServer(app)
        self._http = ClientSession()
        self.url = await self._server.start()
        return self.url

    async def stop(self) -> None:
        if self._http is not None:
            await self._http.close()
        if self._server is not None:
            await self._server.stop()

    async def _health(self, _request: web.Request) -> web.Response:
        return web.Response(text="")

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        if self.garble_next:
            self.garble_next -= 1
            return web.Response(text="not json", content_type="text/plain")
        sid = f"upstream-{uuid.uuid4().hex}"
        session = self.gateway.open_session(sid)
        try:
            assert self._http is not None
            async with self._http.post(
                f"{self.gateway.base_url}/chat/completions",
                json=body,
                headers={"Authorization": f"Bearer {session.key}"},
            ) as resp:
                raw = await resp.read()
                status = resp.status
            if status != 200:
                return web.Response(body=raw, status=status, content_type="application/json")
            (record,) = self.gateway.traces(sid)
            (call,) = record.calls()
        finally:
            self.gateway.drop_session(sid)
        self.calls.append((call.prompt_ids, call.completion_ids, call.logprobs))
        if not body.get("stream"):
            data = json.loads(raw)
            data["prompt_token_ids"] = call.prompt_ids
            data["choices"][0]["token_ids"] = call.completion_ids
            return web.json_response(data)
        return await self._replay(request, raw, call.prompt_ids, call.completion_ids)

    async def _replay(
        self, request: web.Request, raw: bytes, prompt: list[int], sampled: list[int]
    ) -> web.StreamResponse:
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        first = True
        for line in raw.decode().splitlines():
            if not line.startswith("data: "):
                continue
            data = line[len("data: ") :]
            if data.strip() != "[DONE]":
                chunk = json.loads(data)
                if first:
                    chunk["prompt_token_ids"] = prompt
                    first = False
                for choice in chunk.get("choices") or []:
                    # vLLM sends the ids of exactly the tokens a chunk's logprobs cover
                    choice["token_ids"] = sampled if choice.get("logprobs") else []
                data = json.dumps(chunk)
            await out.write(f"data: {data}\n\n".encode())
        await out.write_eof()
        return out
