"""A minimal keep-alive HTTP/1.1 client for the local runtime's loopback calls.

The local runtime talks to its own workers on 127.0.0.1 only, with small JSON bodies, at
hundreds of requests a second. A general-purpose client spends most of a core on
connection-pool bookkeeping at that rate (see ``docs/benchmarks/client.md``); this one
keeps a stack of idle connections per worker and does nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from rollhub.app.auth import sign_request
from rollhub.errors import SubmissionError
from rollhub.submission.callbacks import read_http_body

__all__ = [
    "LoopbackConnectError",
    "LoopbackHTTP",
    "LoopbackHTTPError",
    "LoopbackResponse",
    "refusal_error",
]


class LoopbackHTTPError(ConnectionError):
    """The worker could not be reached or answered with a broken message."""


class LoopbackConnectError(LoopbackHTTPError):
    """No connection to the worker could be opened: the request was certainly not sent."""


class LoopbackResponse:
    """Status code and body of one answer."""

    __slots__ = ("body", "status_code")

    def __init__(self, status_code: int, body: bytes) -> None:
        self.status_code = status_code
        self.body = body

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body)

    @property
    def text(self) -> str:
        """The body as text."""
        return self.body.decode(errors="replace")


class LoopbackHTTP:
    """Pooled HTTP/1.1 connections to ``127.0.0.1:port`` endpoints.

    :param max_idle: idle connections kept per port.
    """

    def __init__(self, *, max_idle: int = 64, secret: str | None = None) -> None:
        #: every request is signed with it (see :mod:`rollhub.app.auth`) when set
        self.secret = secret
        self._idle: dict[int, list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]] = {}
        self._max_idle = max_idle
        self._closed = False

    async def request(
        self,
        method: str,
        port: int,
        path: str,
        *,
        body: object = None,
        headers: dict[str, str] | None = None,
        timeout: float = 30.0,
    ) -> LoopbackResponse:
        """Send one request; JSON-encode ``body`` when given.

        :raises LoopbackConnectError: connection refused (the request was not sent).
        :raises LoopbackHTTPError: connection reset, or a malformed answer.
        :raises TimeoutError: no full answer within ``timeout``.
        """
        data = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
        head = [
            f"{method} {path} HTTP/1.1",
            f"host: 127.0.0.1:{port}",
            f"content-length: {len(data)}",
        ]
        if body is not None:
            head.append("content-type: application/json")
        signed = {} if self.secret is None else sign_request(self.secret, method, path, data)
        for name, value in {**(headers or {}), **signed}.items():
            head.append(f"{name}: {value}")
        raw = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + data
        async with asyncio.timeout(timeout):
            # A pooled connection may have been closed by the server while idle: one retry
            # on a fresh connection, which is safe because the request never arrived.
            for fresh in (False, True):
                conn = None if fresh else self._take(port)
                reused = conn is not None
                if conn is None:
                    try:
                        conn = await asyncio.open_connection("127.0.0.1", port)
                    except OSError as exc:
                        raise LoopbackConnectError(
                            f"cannot connect to 127.0.0.1:{port}: {exc}"
                        ) from exc
                reader, writer = conn
                try:
                    writer.write(raw)
                    await writer.drain()
                    status, keep, payload = await _read_response(reader)
                except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
                    writer.close()
                    if reused and isinstance(exc, ConnectionError | asyncio.IncompleteReadError):
                        continue
                    raise LoopbackHTTPError(
                        f"127.0.0.1:{port}{path}: {type(exc).__name__}: {exc}"
                    ) from exc
                except BaseException:
                    writer.close()
                    raise
                if keep:
                    self._give(port, conn)
                else:
                    writer.close()
                return LoopbackResponse(status, payload)
        raise AssertionError("unreachable")  # pragma: no cover

    def _take(self, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        stack = self._idle.get(port)
        while stack:
            reader, writer = stack.pop()
            if not writer.is_closing() and not reader.at_eof():
                return reader, writer
            writer.close()
        return None

    def _give(self, port: int, conn: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> None:
        stack = self._idle.setdefault(port, [])
        if self._closed or len(stack) >= self._max_idle:
            conn[1].close()
        else:
            stack.append(conn)

    def drop(self, port: int) -> None:
        """Close the idle connections to ``port`` (its worker is gone)."""
        for _reader, writer in self._idle.pop(port, []):
            writer.close()

    async def aclose(self) -> None:
        """Close every idle connection."""
        self._closed = True
        for port in list(self._idle):
            self.drop(port)
        with contextlib.suppress(Exception):
            await asyncio.sleep(0)


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bool, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/"):
        raise ValueError(f"bad status line {lines[0]!r}")
    status = int(parts[1])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    body = await read_http_body(reader, headers) if status not in (204, 304) else b""
    if body is None:
        raise ValueError("bad body framing")
    keep = headers.get("connection", "").lower() != "close" and parts[0] == "HTTP/1.1"
    return status, keep, body


def refusal_error(response: LoopbackResponse, sid: str) -> SubmissionError:
    """The error of a worker that refused session ``sid`` (transient for 5xx, 408, 429)."""
    try:
        detail: Any = response.json()
    except ValueError:
        detail = response.text[:500]
    transient = response.status_code >= 500 or response.status_code in (408, 429)
    return SubmissionError(
        f"the worker refused session {sid}: HTTP {response.status_code}: {detail}",
        transient=transient,
        session_id=sid,
        status_code=response.status_code,
    )
