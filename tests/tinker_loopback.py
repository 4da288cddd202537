"""A loopback of the hosted Tinker API for tests that run the real tinker SDK against it.

It answers the routes the SDK (0.22-0.24) itself calls, with the JSON shapes of the SDK's
own types: client config, session and heartbeat, sampling session, ``asample`` returning a
future id, ``retrieve_future`` polled until the ``SampleResponse`` is ready, and telemetry.
Serve :meth:`TinkerLoopback.handle` for every path; a subclass adds routes in front of it.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

__all__ = ["TinkerLoopback"]


class TinkerLoopback:
    """State + handlers of the loopback Tinker API."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any], dict[str, str]]] = []
        self.futures: dict[str, dict[str, Any]] = {}
        self.pending_polls = 1  # answer try_again this many times before the result
        self.fail: str | None = None

    def sample(self, req: dict[str, Any]) -> dict[str, Any]:
        sp = req["sampling_params"]
        prompt = [t for c in req["prompt"]["chunks"] for t in c["tokens"]]
        stops = sp.get("stop") or []
        tokens: list[int] = []
        reason = "length"
        for i in range(sp.get("max_tokens") or 8):
            tokens.append((sum(prompt) + 17 * i + (sp.get("seed") or 0)) % 500 + 3)
            if tokens[-1] in stops:
                reason = "stop"
                break
        seq = {
            "stop_reason": reason,
            "tokens": tokens,
            "logprobs": [-0.5 / (i + 1) for i in range(len(tokens))],
        }
        return {"type": "sample", "sequences": [seq], "prompt_logprobs": None}

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        data = json.loads(body) if body else {}
        self.calls.append((request.path, data, dict(request.headers)))
        path = request.path
        if path == "/api/v1/client/config":
            return web.json_response({"pjwt_auth_enabled": False, "use_pyqwest_transport": False})
        if path == "/api/v1/create_session":
            return web.json_response({"type": "create_session", "session_id": "sess-1"})
        if path == "/api/v1/session_heartbeat":
            return web.json_response({"type": "session_heartbeat"})
        if path == "/api/v1/create_sampling_session":
            return web.json_response(
                {"type": "create_sampling_session", "sampling_session_id": "samp-1"}
            )
        if path == "/api/v1/asample":
            rid = f"req-{len(self.futures)}"
            self.futures[rid] = data
            return web.json_response({"request_id": rid})
        if path == "/api/v1/retrieve_future":
            rid = data["request_id"]
            if self.pending_polls > 0:
                self.pending_polls -= 1
                return web.json_response(
                    {"type": "try_again", "request_id": rid, "queue_state": "active"}
                )
            if self.fail:
                return web.json_response({"error": self.fail, "category": "user"})
            return web.json_response(self.sample(self.futures[rid]))
        if path == "/api/v1/telemetry":
            return web.json_response({"status": "accepted"})
        return web.json_response({"detail": f"no route {path}"}, status=404)

    def paths(self) -> list[str]:
        return [p for p, _, _ in self.calls]
