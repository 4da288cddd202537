"""What the HTTP sampling backends (vLLM, SGLang) share: one pooled aiohttp session per
backend, timeouts, retries on connection errors only, SSE parsing, and error mapping.

Retry policy: a request is retried only when the TCP connection could not be opened (refused,
unreachable, connect timeout), because only then is it certain the engine never saw it. A
reset, a read timeout or an error status is never retried: the engine may already be
sampling, and a second request would sample again.

Errors are :class:`rollhub.errors.GatewayError` with context ``engine`` (backend name),
``url``, ``unreachable`` (True: no connection could be made; False: the engine answered with
an error, broke the connection or sent something unreadable) and ``status`` (the HTTP status,
or None). The gateway's HTTP layer answers 502 for either.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar, Final

from pydantic import Field, SecretStr
from rollhub.errors import GatewayError
from rollhub.sampling import SamplingBackend, SamplingBackendOptions

if TYPE_CHECKING:
    import aiohttp

log = logging.getLogger(__name__)

__all__ = ["HTTPBackend", "HTTPBackendOptions"]


class HTTPBackendOptions(SamplingBackendOptions):
    """Connection options of an HTTP sampling backend."""

    base_url: str = Field("http://127.0.0.1:8000", description="engine root, no trailing path")
    api_key: SecretStr | None = Field(None, description="sent as 'Authorization: Bearer'")
    headers: dict[str, str] = Field(default_factory=dict, description="extra request headers")
    connect_timeout_s: float = Field(5.0, gt=0)
    read_timeout_s: float = Field(600.0, gt=0, description="max silence while reading a reply")
    connect_retries: int = Field(3, ge=0, description="retries when the connection is refused")
    retry_backoff_s: float = Field(0.25, ge=0, description="first backoff, doubled per retry")
    max_connections: int = Field(512, ge=1, description="pooled connections to the engine")
    weight_version: int | None = Field(None, description="reported when the engine sends none")


class HTTPBackend(SamplingBackend):
    """Base of the HTTP backends: owns the aiohttp session and the request plumbing."""

    options: HTTPBackendOptions
    _connect_errors: ClassVar[tuple[type[BaseException], ...]] = ()

    def __init__(self, options: HTTPBackendOptions | None = None, **kwargs: object) -> None:
        super().__init__(options, **kwargs)
        self._session: Any = None
        self._session_loop: asyncio.AbstractEventLoop | None = None

    @property
    def base_url(self) -> str:
        return self.options.base_url.rstrip("/")

    async def start(self) -> None:
        """Open the pooled session (idempotent; reopened if the event loop changed)."""
        import aiohttp

        loop = asyncio.get_running_loop()
        if self._session is not None and not self._session.closed and self._session_loop is loop:
            return
        headers = dict(self.options.headers)
        if self.options.api_key is not None:
            headers["Authorization"] = f"Bearer {self.options.api_key.get_secret_value()}"
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self.options.max_connections),
            timeout=aiohttp.ClientTimeout(
                total=None,
                connect=self.options.connect_timeout_s,
                sock_read=self.options.read_timeout_s,
            ),
            headers=headers,
        )
        self._session_loop = loop

    async def close(self) -> None:
        """Close the pooled session (idempotent)."""
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()

    def _error(
        self, message: str, *, url: str, unreachable: bool, status: int | None = None
    ) -> GatewayError:
        return GatewayError(
            f"{self.name} engine at {url}: {message}",
            engine=self.name,
            url=url,
            unreachable=unreachable,
            status=status,
        )

    @asynccontextmanager
    async def _post(
        self, path: str, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """POST ``body`` as JSON; yield the (2xx) response. Retries connect errors only."""
        import aiohttp

        await self.start()
        url = f"{self.base_url}{path}"
        connect_errors = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)
        attempt = 0
        while True:
            try:
                resp = await self._session.post(url, json=body, headers=headers)
                break
            except connect_errors as exc:
                if attempt >= self.options.connect_retries:
                    raise self._error(
                        f"unreachable after {attempt + 1} attempts: {exc}",
                        url=url,
                        unreachable=True,
                    ) from exc
                delay = self.options.retry_backoff_s * (2**attempt)
                log.warning("%s engine unreachable (%s); retry in %.2fs", self.name, exc, delay)
                attempt += 1
                await asyncio.sleep(delay)
            except (TimeoutError, aiohttp.ClientError) as exc:
                raise self._error(f"request failed: {exc!r}", url=url, unreachable=False) from exc
        try:
            if resp.status >= 400:
                text = (await resp.text())[:500]
                raise self._error(
                    f"HTTP {resp.status}: {text}", url=url, unreachable=False, status=resp.status
                )
            yield resp
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise self._error(
                f"reading the reply failed: {exc!r}", url=url, unreachable=False
            ) from exc
        finally:
            resp.close()

    async def _post_json(
        self, path: str, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> dict[str, Any]:
        async with self._post(path, body, headers) as resp:
            try:
                data = await resp.json(content_type=None)
            except (json.JSONDecodeError, ValueError) as exc:
                raise self._error(
                    f"reply is not JSON: {exc}", url=str(resp.url), unreachable=False
                ) from exc
        if not isinstance(data, dict):
            raise self._error("reply is not a JSON object", url=str(resp.url), unreachable=False)
        return data

    async def _sse(self, resp: aiohttp.ClientResponse) -> AsyncIterator[dict[str, Any]]:
        """The JSON objects of an SSE stream's ``data:`` lines, until ``[DONE]``."""
        buffer = b""
        async for data in resp.content.iter_any():
            buffer += data
            *lines, buffer = buffer.split(b"\n")
            for raw in lines:
                event = self._sse_event(raw, resp)
                if event is _DONE:
                    return
                if event is not None:
                    yield event
        if buffer.strip() and self._sse_event(buffer, resp) not in (None, _DONE):
            raise self._error("stream ended inside an event", url=str(resp.url), unreachable=False)

    def _sse_event(self, raw: bytes, resp: aiohttp.ClientResponse) -> dict[str, Any] | _End | None:
        line = raw.decode("utf-8").strip()
        if not line.startswith("data:"):
            return None
        payload = line[5:].strip()
        if payload == "[DONE]":
            return _DONE
        try:
            event = json.loads(payload)
        except json.JSONDecodeError as exc:
            raise self._error(
                f"bad SSE event {payload[:200]!r}", url=str(resp.url), unreachable=False
            ) from exc
        if not isinstance(event, dict):
            raise self._error("SSE event is not an object", url=str(resp.url), unreachable=False)
        if "error" in event or event.get("object") == "error":
            detail = event.get("error") or event.get("message")
            raise self._error(
                f"engine error in stream: {detail}", url=str(resp.url), unreachable=False
            )
        return event


class _End(Enum):
    """The ``data: [DONE]`` line that ends a stream."""

    DONE = "[DONE]"


_DONE: Final = _End.DONE
