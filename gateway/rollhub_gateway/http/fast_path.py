"""Gateway requests over a lean HTTP/1.1 path in front of the aiohttp application.

aiohttp's per-request machinery (request and response objects, routing, middlewares, a
task per request, header formatting) costs a gateway about as much CPU as a whole turn's
rendering on a long tool session. The gateway's requests are simple: model calls and
admin calls, a JSON body with a ``Content-Length`` or none.

Every connection starts on this path. A request it can frame exactly and plainly (a
request line ``GET|POST|PUT|DELETE <route> HTTP/1.1`` for a route the gateway registered
here, header lines of plain tokens and values, at most one ``Content-Length`` within the
body limit, no ``Transfer-Encoding``, ``Expect`` or ``Upgrade``) goes straight to the
gateway's handler for that route, the same one aiohttp would call. Anything else (another
route, a chunked body, HTTP/1.0, a header line it would have to interpret, a
percent-encoded path) hands the connection to aiohttp at that request's first byte, and
aiohttp serves the connection from then on exactly as it would have without this path: it
never sees a request this path has read, and this path never reads a request whose
framing aiohttp might read differently. Requests of one connection are answered in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import http
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from multidict import CIMultiDict

from rollhub_gateway.http.request_head import Handler, RequestHead, Resolver, parse_head

if TYPE_CHECKING:
    from aiohttp import web

__all__ = ["FastPathServer", "FastRequest", "FastStreamResponse"]

log = logging.getLogger(__name__)

#: a request head longer than this goes to aiohttp (which applies its own limits)
MAX_HEAD_BYTES = 16 * 1024
#: an idle connection (no request under way) is closed after this long, as aiohttp does
KEEPALIVE_S = 75.0
#: how long stopping waits for calls under way before it cancels them
SHUTDOWN_GRACE_S = 10.0

_PREFIXES = (b"GET /", b"POST /", b"PUT /", b"DELETE /")


class FastPathServer:
    """The protocol factory of a listening socket: fast model calls, aiohttp for the rest.

    :param resolve: the handler of a route served here (see :data:`Resolver`).
    :param fallback: aiohttp's protocol factory (``AppRunner.server``).
    :param max_body_bytes: larger bodies go to aiohttp, which answers 413.
    :param count: ``count(route, status)`` for every request answered here.
    """

    def __init__(
        self,
        resolve: Resolver,
        fallback: Callable[[], asyncio.Protocol],
        *,
        max_body_bytes: int,
        count: Callable[[str, int], None] | None = None,
    ) -> None:
        self.resolve = resolve
        self.fallback = fallback
        self.max_body_bytes = max_body_bytes
        self.count = count
        self.connections: set[FastPathProtocol] = set()
        #: requests answered here, and connections handed to aiohttp
        self.served = 0
        self.handed_off = 0

    def __call__(self) -> FastPathProtocol:
        return FastPathProtocol(self)

    async def close(self, grace_s: float | None = None) -> None:
        """Close the connections still on this path: idle ones at once, busy ones after
        their call is answered; calls still running after ``grace_s`` (default
        :data:`SHUTDOWN_GRACE_S`) are cancelled and their connections cut."""
        grace_s = SHUTDOWN_GRACE_S if grace_s is None else grace_s
        busy = []
        for conn in list(self.connections):
            if conn.task is None:
                conn.close()
            else:
                conn.close_after_call()
                busy.append(conn)
        tasks = [c.task for c in busy if c.task is not None]
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=grace_s)
            for conn in busy:
                conn.abort()
            for task in late:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self.connections.clear()


class FastRequest:
    """What the gateway's handlers read of a request (``aiohttp.web.Request``'s names), for
    a request read on the fast path."""

    __slots__ = ("_body", "content_length", "headers", "match_info", "method", "path", "protocol")

    scheme = "http"

    def __init__(
        self,
        protocol: FastPathProtocol,
        method: str,
        path: str,
        headers: CIMultiDict[str],
        body: bytes,
        match_info: dict[str, str],
    ) -> None:
        self.protocol = protocol
        self.method = method
        self.path = path
        self.headers = headers
        self._body = body
        self.content_length = len(body)
        self.match_info = match_info

    async def read(self) -> bytes:
        """The body (read whole before the handler was called)."""
        return self._body

    @property
    def host(self) -> str:
        """The ``Host`` header, else the address the connection came to."""
        host = self.headers.get("Host")
        if host:
            return host
        sock = self.transport.get_extra_info("sockname") if self.transport else None
        return f"{sock[0]}:{sock[1]}" if sock else "localhost"

    @property
    def transport(self) -> asyncio.Transport | None:
        """The connection, None once it is gone."""
        return self.protocol.transport

    def stream_response(self, headers: dict[str, str]) -> FastStreamResponse:
        """A chunked response written straight to this connection."""
        return FastStreamResponse(self.protocol, headers)


class FastStreamResponse:
    """``web.StreamResponse``'s ``prepare`` / ``write`` / ``write_eof`` on a fast connection
    (chunked transfer encoding, with the transport's flow control)."""

    def __init__(self, protocol: FastPathProtocol, headers: dict[str, str]) -> None:
        self.protocol = protocol
        self.headers = headers
        self.status = 200

    async def prepare(self, _request: object) -> None:
        head = {**self.headers, "Transfer-Encoding": "chunked"}
        self.protocol.write_head(200, head)

    async def write(self, data: bytes) -> None:
        if data:
            await self.protocol.write(b"%x\r\n%b\r\n" % (len(data), data))

    async def write_eof(self) -> None:
        await self.protocol.write(b"0\r\n\r\n")


class FastPathProtocol(asyncio.Protocol):
    """One connection, on the fast path until a request needs aiohttp."""

    def __init__(self, server: FastPathServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.task: asyncio.Task[None] | None = None
        self._buf = bytearray()
        self._close_after = False
        self._handed_off = False
        self._can_write = asyncio.Event()
        self._can_write.set()
        self._idle: asyncio.TimerHandle | None = None
        self._last = 0.0
        self._paused = False
        #: the request whose body is still coming: (body offset, head, route)
        self._pending: tuple[int, RequestHead, tuple[Handler, str, dict[str, str]]] | None = None

    # asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.server.connections.add(self)
        self._arm_idle()

    def data_received(self, data: bytes) -> None:
        self._buf += data
        self._last = asyncio.get_running_loop().time()
        if self.task is None:
            self._next()
        elif len(self._buf) > self.server.max_body_bytes + MAX_HEAD_BYTES and self.transport:
            # requests piling up behind one under way: read on once it is answered
            self.transport.pause_reading()
            self._paused = True

    def eof_received(self) -> bool | None:
        # as aiohttp: a client that stops sending has left; closing cancels its call
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.server.connections.discard(self)
        if self._idle is not None:
            self._idle.cancel()
        if self.task is not None:  # as aiohttp's handler_cancellation: stop sampling for nobody
            self.task.cancel()
        self._can_write.set()

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    # Requests -----------------------------------------------------------------------------

    def _next(self) -> None:
        """Start the next buffered request, hand the connection off, or wait for bytes."""
        if self.transport is None or self._handed_off:
            return
        buf = self._buf
        if self._pending is None:  # a new request: its head, read once
            end = buf.find(b"\r\n\r\n", 0, MAX_HEAD_BYTES)
            if end < 0:
                lead = bytes(buf[:8])
                if (
                    len(buf) >= MAX_HEAD_BYTES
                    or not any(p.startswith(lead) or lead.startswith(p) for p in _PREFIXES)
                    # a line ended by a bare LF: the CRLF CRLF waited for may never come
                    or buf.count(b"\n") != buf.count(b"\r\n")
                ):
                    self._hand_off()
                return
            head = parse_head(bytes(buf[:end]))
            route = None
            if head is not None and head.length <= self.server.max_body_bytes:
                route = self.server.resolve(head.method, head.path)
            if head is None or route is None:
                self._hand_off()
                return
            self._pending = (end + 4, head, route)
        start, head, (handler, name, match_info) = self._pending
        if len(buf) < start + head.length:
            return  # the body is still coming
        self._pending = None
        body = bytes(buf[start : start + head.length])
        del buf[: start + head.length]
        self._close_after = head.close
        request = FastRequest(self, head.method, head.path, head.headers, body, match_info)
        self.task = asyncio.get_running_loop().create_task(self._serve(request, handler, name))

    async def _serve(self, request: FastRequest, handler: Handler, route: str) -> None:
        status = 500
        try:
            resp = await handler(request)
            status = resp.status
            if not isinstance(resp, FastStreamResponse):
                self._write_response(resp)
        except (ConnectionResetError, asyncio.CancelledError):
            status = 499  # the client left; nothing to answer
            self.close()
        except Exception:
            log.exception("fast path: %s failed", route)
            self._close_after = True
            with contextlib.suppress(ConnectionResetError):
                body = b'{"error": {"message": "internal gateway error", "type": "server_error"}}'
                self.write_head(500, _JSON_HEADERS | {"Content-Length": str(len(body))}, body)
        finally:
            self.task = None
            if self._paused and self.transport is not None:
                self._paused = False
                self.transport.resume_reading()
            self.server.served += 1
            if self.server.count is not None:
                self.server.count(route, status)
        if self._close_after:
            self.close()
        elif self.transport is not None:
            self._last = asyncio.get_running_loop().time()
            if self._buf:
                self._next()

    def _write_response(self, resp: web.Response) -> None:
        body = resp.body or b""
        assert isinstance(body, bytes | bytearray)  # the routes answer with bytes, no payload
        headers = {"Content-Type": resp.headers.get("Content-Type", "application/json")}
        for name, value in resp.headers.items():
            if name.lower() not in ("content-type", "content-length"):
                headers[name] = value
        headers["Content-Length"] = str(len(body))
        self.write_head(resp.status, headers, body)

    def write_head(
        self, status: int, headers: dict[str, str], body: bytes | bytearray = b""
    ) -> None:
        """The status line and headers (and a whole body, in the same write)."""
        if self.transport is None:
            raise ConnectionResetError("the client closed the connection")
        lines = [f"HTTP/1.1 {status} {_phrase(status)}", f"Date: {_date()}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        if self._close_after:
            lines.append("Connection: close")
        self.transport.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)

    async def write(self, data: bytes) -> None:
        """Write ``data`` once the transport takes more (flow control)."""
        await self._can_write.wait()
        if self.transport is None or self.transport.is_closing():
            raise ConnectionResetError("the client closed the connection")
        self.transport.write(data)

    def _hand_off(self) -> None:
        """Give the connection to aiohttp, from the first byte of the request buffered."""
        transport = self.transport
        if transport is None:
            return
        self._handed_off = True
        self.server.connections.discard(self)
        self.server.handed_off += 1
        if self._idle is not None:
            self._idle.cancel()
        protocol = self.server.fallback()
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        data, self._buf = bytes(self._buf), bytearray()
        if data:
            protocol.data_received(data)

    def _arm_idle(self) -> None:
        loop = asyncio.get_running_loop()
        self._last = loop.time()
        self._idle = loop.call_later(KEEPALIVE_S, self._on_idle)

    def _on_idle(self) -> None:
        # one timer per connection, pushed back by activity (not re-armed every request)
        if self._handed_off or self.transport is None:
            return
        left = self._last + KEEPALIVE_S - asyncio.get_running_loop().time()
        if self.task is None and left <= 0:
            self.close()
        else:
            self._idle = asyncio.get_running_loop().call_later(max(left, 1.0), self._on_idle)

    def close(self) -> None:
        """Close the connection (a call under way is cancelled when it is lost)."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def close_after_call(self) -> None:
        """Close the connection once the call under way is answered."""
        self._close_after = True

    def abort(self) -> None:
        """Cut the connection now, unsent data and all."""
        if self.transport is not None:
            self.transport.abort()


_JSON_HEADERS = {"Content-Type": "application/json"}
_PHRASES = {s.value: s.phrase for s in http.HTTPStatus}


def _phrase(status: int) -> str:
    return _PHRASES.get(status, "Unknown")


_DATE: list[Any] = [0, ""]


def _date() -> str:
    now = int(time.time())
    if _DATE[0] != now:
        _DATE[:] = [now, email.utils.formatdate(now, usegmt=True)]
    return str(_DATE[1])
