"""Completion notices: a loopback HTTP endpoint the agent app calls after writing a result.

Polling a store for thousands of rollouts costs requests and adds latency; instead the app
POSTs ``{"session_id", "exp_id", "input_id", "result_key", "status"}`` to the
``_rollout.callback_url`` right after its store write, and the client reads the store once.
Notices may be lost (the app retries only briefly), so the client keeps a slow store poll
as the fallback; see :func:`rollhub.submission.retry.poll_schedule`.

The server is a small HTTP/1.1 implementation on :mod:`asyncio` streams rather than an ASGI
stack: it serves one route, on loopback, for one process, and it costs a fraction of the
CPU per request (see ``docs/benchmarks/client.md``), which matters when hundreds of
rollouts a second finish on two cores.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from collections.abc import Callable
from typing import Any

__all__ = ["CALLBACK_PATH", "CallbackServer", "read_http_body"]

log = logging.getLogger(__name__)

CALLBACK_PATH = "/rollhub/callback"
_MAX_HEADER = 16 * 1024
_MAX_BODY = 1024 * 1024

NoticeHandler = Callable[[dict[str, Any]], None]


class CallbackServer:
    """Receives completion notices on ``http://127.0.0.1:<port>/rollhub/callback/<token>``.

    :param on_notice: called on the event loop with each notice (a JSON object).
    :param host: address to bind; loopback unless agents run on other machines.
    :param port: 0 picks a free port.
    :param advertise_host: the host put into :attr:`url` (default: ``host``).
    :param keep_alive: keep connections open between notices (False answers every notice
        with ``Connection: close``).

    The random token in the path keeps stray requests (another client's agents, a port
    reused after a restart) from resolving this client's futures.
    """

    def __init__(
        self,
        on_notice: NoticeHandler,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        advertise_host: str | None = None,
        keep_alive: bool = True,
    ) -> None:
        self._on_notice = on_notice
        self._keep_alive = keep_alive
        self._host = host
        self._port = port
        self._advertise = advertise_host or host
        self._token = secrets.token_hex(8)
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.StreamWriter] = set()
        #: notices accepted so far (for statistics and tests).
        self.received = 0

    @property
    def url(self) -> str:
        """The URL to put in ``_rollout.callback_url``."""
        if self._server is None:
            from rollhub.errors import UsageError

            raise UsageError(
                "CallbackServer.url was read before start(); await server.start() first"
            )
        return f"http://{self._advertise}:{self._port}{CALLBACK_PATH}/{self._token}"

    async def start(self) -> None:
        """Bind and start serving (idempotent)."""
        if self._server is not None:
            return
        self._server = await asyncio.start_server(self._serve, self._host, self._port)
        self._port = self._server.sockets[0].getsockname()[1]
        log.debug("callback server on %s", self.url)

    async def close(self) -> None:
        """Stop serving and drop open connections (idempotent)."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for w in list(self._conns):
            w.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 2.0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._conns.add(writer)
        try:
            while True:
                keep = await self._one_request(reader, writer)
                if not keep:
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except Exception:
            log.exception("callback server: request failed")
        finally:
            self._conns.discard(writer)
            writer.close()

    async def _one_request(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                log.debug("callback server: connection closed mid-request")
            return False
        if len(head) > _MAX_HEADER:
            await _respond(writer, 431, b"", close=True)
            return False
        lines = head.decode("latin-1").split("\r\n")
        try:
            method, target, version = lines[0].split(" ", 2)
        except ValueError:
            await _respond(writer, 400, b"bad request line", close=True)
            return False
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        body = await read_http_body(reader, headers)
        if body is None:
            await _respond(writer, 400, b"bad body framing", close=True)
            return False
        close = (
            not self._keep_alive
            or headers.get("connection", "").lower() == "close"
            or version == "HTTP/1.0"
        )
        status, reply = self._route(method, target, body)
        await _respond(writer, status, reply, close=close)
        return not close

    def _route(self, method: str, target: str, body: bytes) -> tuple[int, bytes]:
        if target != f"{CALLBACK_PATH}/{self._token}":
            return 404, b"unknown path"
        if method != "POST":
            return 405, b"POST only"
        try:
            notice = json.loads(body)
        except ValueError:
            return 400, b"body is not JSON"
        if not isinstance(notice, dict) or not isinstance(notice.get("session_id"), str):
            return 400, b"notice needs a string session_id"
        self.received += 1
        self._on_notice(notice)
        return 204, b""


async def read_http_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes | None:
    """Read an HTTP/1.1 message body (Content-Length or chunked); None on bad framing."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        chunks: list[bytes] = []
        total = 0
        while True:
            size_line = await reader.readuntil(b"\r\n")
            try:
                size = int(size_line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                return None
            if size == 0:
                # trailers end with an empty line
                while (await reader.readuntil(b"\r\n")) != b"\r\n":
                    pass
                return b"".join(chunks)
            total += size
            if total > _MAX_BODY:
                return None
            chunks.append(await reader.readexactly(size))
            await reader.readexactly(2)
    length = headers.get("content-length")
    if length is None:
        return b""
    try:
        n = int(length)
    except ValueError:
        return None
    if n < 0 or n > _MAX_BODY:
        return None
    return await reader.readexactly(n)


_REASONS = {
    204: "No Content",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    431: "Request Header Fields Too Large",
}


async def _respond(writer: asyncio.StreamWriter, status: int, body: bytes, *, close: bool) -> None:
    head = f"HTTP/1.1 {status} {_REASONS.get(status, 'OK')}\r\n"
    if status != 204:
        head += f"content-type: text/plain\r\ncontent-length: {len(body)}\r\n"
    if close:
        head += "connection: close\r\n"
    writer.write(head.encode("latin-1") + b"\r\n" + (body if status != 204 else b""))
    await writer.drain()
