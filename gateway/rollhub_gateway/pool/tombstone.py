"""What answers at a dead replica's address: a 410 naming the replica and why it died.

Without it, an agent whose replica died sees only "connection refused", and its rollout
fails with a cause that says nothing. Once a replica process has died, the pool listens on
its port in its own process and answers every call in the caller's wire format (OpenAI
Chat, Responses or Anthropic) with status 410, which SDKs do not retry: the agent's error,
and so the episode's failure cause, names the replica and the cause. Binding can fail (the
port was taken meanwhile); then agents keep seeing refused connections.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web
from rollhub.errors import GatewayError

from rollhub_gateway.http.app_server import AppServer
from rollhub_gateway.protocols import AnthropicMessages, OpenAIChat, OpenAIResponses, WireError
from rollhub_gateway.protocols.base import error_response

__all__ = ["Tombstone"]

log = logging.getLogger(__name__)

_ADAPTERS = (
    ("/v1/messages", AnthropicMessages()),
    ("/v1/responses", OpenAIResponses()),
)
_OPENAI = OpenAIChat()


class Tombstone:
    """Serves ``message`` as a 410 on every route of ``url`` (a dead replica's root URL)."""

    def __init__(self, url: str, message: str) -> None:
        self.url = url
        self.message = message
        self._server: Any = None

    async def start(self) -> bool:
        """Listen on the dead replica's port; False when the port cannot be taken."""
        parts = urlsplit(self.url)
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._answer)
        server = AppServer(app, parts.hostname or "127.0.0.1", parts.port or 0)
        try:
            await server.start()
        except GatewayError as exc:
            log.warning("cannot answer for the dead replica at %s: %s", self.url, exc)
            return False
        self._server = server
        return True

    async def _answer(self, request: web.Request) -> web.Response:
        adapter = next((a for prefix, a in _ADAPTERS if request.path.startswith(prefix)), _OPENAI)
        return error_response(adapter, WireError("gone", self.message))

    async def stop(self) -> None:
        """Stop listening (idempotent)."""
        server, self._server = self._server, None
        if server is not None:
            await server.stop()
