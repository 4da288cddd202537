"""Serving an aiohttp application on the running event loop, its gateway routes on the
fast path (:mod:`rollhub_gateway.http.fast_path`) and everything else on aiohttp."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from aiohttp import web
from rollhub.errors import GatewayError

from rollhub_gateway.http.fast_path import FastPathServer
from rollhub_gateway.http.request_head import Resolver

__all__ = ["BACKLOG", "AppServer"]

log = logging.getLogger(__name__)

#: listen backlog: thousands of agents may connect at once
BACKLOG = 2048


class AppServer:
    """An aiohttp application served on the running loop (``host``/``port``; 0 = free port).

    :param fast_path: the routes served on the lean HTTP path in front of the application
        (:mod:`rollhub_gateway.http.fast_path`); None serves everything with aiohttp.
    :param max_body_bytes: bodies the fast path reads (larger ones go to aiohttp).
    :param count: ``count(route, status)`` of the fast path's requests (metrics).
    """

    def __init__(
        self,
        app: web.Application,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        fast_path: Resolver | None = None,
        max_body_bytes: int = 1024**2,
        count: Callable[[str, int], None] | None = None,
    ) -> None:
        self.app = app
        self.host = host
        self.port = port
        self.fast_path = fast_path
        self.max_body_bytes = max_body_bytes
        self.count = count
        #: the fast path's protocol factory while serving with one
        self.fast: FastPathServer | None = None
        self._runner: web.AppRunner | None = None
        self._listener: asyncio.AbstractServer | None = None

    async def start(self) -> str:
        """Bind and serve; returns ``http://host:port``."""
        # handler_cancellation: a client that disconnects mid-call cancels its handler,
        # which closes the engine request instead of sampling for nobody
        runner = web.AppRunner(self.app, handler_cancellation=True, access_log=None)
        await runner.setup()
        try:
            if self.fast_path is None:
                site = web.TCPSite(runner, self.host, self.port, backlog=BACKLOG)
                await site.start()
                # the bound addresses (port 0 picks one), through the runner's public API
                addresses = runner.addresses
            else:
                assert runner.server is not None
                self.fast = FastPathServer(
                    self.fast_path,
                    runner.server,
                    max_body_bytes=self.max_body_bytes,
                    count=self.count,
                )
                loop = asyncio.get_running_loop()
                self._listener = await loop.create_server(
                    self.fast, self.host, self.port, backlog=BACKLOG, reuse_address=True
                )
                addresses = [s.getsockname() for s in self._listener.sockets]
        except OSError as exc:
            await runner.cleanup()
            raise GatewayError(
                f"cannot listen on {self.host}:{self.port}: {exc}; choose another port"
            ) from exc
        self._runner = runner
        port = addresses[0][1] if addresses else self.port
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{port}"

    async def stop(self) -> None:
        """Stop serving (calls in flight are cancelled) and run the app's cleanup."""
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        if self.fast is not None:
            await self.fast.close()
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
