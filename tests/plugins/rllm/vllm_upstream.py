"""A vLLM-style upstream made of a real rollhub gateway, for rllm-model-gateway to record.

rllm-model-gateway forwards every one of its sessions' calls to one engine URL with one
key, and reads token ids from vLLM's response fields (the root ``prompt_token_ids`` and
each choice's ``token_ids``). The rollhub gateway returns those when asked
(``return_token_ids``, which this relay sets), but it keys its own sessions by the
caller's key, so calls of different rllm sessions would land in one gateway conversation.
This relay runs each call
in a fresh one-turn gateway session instead, and keeps the engine's side of every call
(``calls``: prompt ids, sampled ids, logprobs) for the tests to compare with, plus a switch
to answer garbage (``garble_next``) for the fault tests.

It runs on the gateway's own event loop (``ThreadedGateway.call``), so it may use the
gateway's in-process API directly. It also answers ``/health`` as vLLM does, for the
gateway's worker health checks.
"""

from __future__ import annotations

import uuid
from typing import Any

from aiohttp import ClientSession, web
from rollhub_gateway.gateway import Gateway
from rollhub_gateway.http.app_server import AppServer


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
            # the gateway's own vLLM-style fields: prompt_token_ids and per-choice token_ids
            async with self._http.post(
                f"{self.gateway.base_url}/chat/completions",
                json={**body, "return_token_ids": True},
                headers={"Authorization": f"Bearer {session.key}"},
            ) as resp:
                raw = await resp.read()
                status, ctype = resp.status, resp.content_type
            if status == 200:
                (record,) = self.gateway.traces(sid)
                (call,) = record.calls()
                self.calls.append((call.prompt_ids, call.completion_ids, call.logprobs))
        finally:
            self.gateway.drop_session(sid)
        return web.Response(body=raw, status=status, content_type=ctype)
