"""The agents' side of the wire: a loopback relay that counts each session's model calls.

rllm-model-gateway writes traces fire-and-forget (always for streamed replies, and for
plain replies unless ``sync_traces`` is on), so a read right after an agent's last reply
can miss its final call. Agents therefore reach the gateway through this relay, which
forwards ``/sessions/{sid}/v1/...`` byte for byte (SSE included) and counts, per session,
the calls the gateway answered with a 2xx reply, counted just before the agent gets the
end of that reply (the calls the gateway stores a trace for). The token source then waits until the gateway holds that many answered
traces, so it never hands over a session with a missing turn.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from aiohttp import ClientError, ClientSession, ClientTimeout, web
from rollhub.errors import TokenRetrievalError

__all__ = ["SessionCalls", "SessionRelay"]

log = logging.getLogger(__name__)

_HOP_BY_HOP = frozenset(
    {
        "connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
        "content-length", "content-encoding", "host", "proxy-authorization",
    }
)  # fmt: skip


@dataclass
class SessionCalls:
    """What the relay saw of one session."""

    answered: int = 0
    #: calls relayed but not yet answered
    in_flight: int = 0
    failed: int = 0
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def settle(self, status: int) -> None:
        """Count one finished call: answered (2xx, the gateway stores a trace) or failed."""
        self.in_flight -= 1
        if 200 <= status < 300:
            self.answered += 1
        else:
            self.failed += 1
        self._bump()

    def _bump(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()


#: the last event of an OpenAI-style stream
_DONE = b"data: [DONE]"


def _is_model_call(method: str, tail: str) -> bool:
    return method == "POST" and tail.rstrip("/").endswith("completions")


class SessionRelay:
    """An aiohttp relay in front of one rllm-model-gateway, served on the running loop.

    :param gateway_url: the gateway's root URL.
    :param host: where to listen (agents on this machine: 127.0.0.1).
    """

    def __init__(self, gateway_url: str, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.gateway_url = gateway_url.rstrip("/")
        self.host = host
        self.port = port
        self.sessions: dict[str, SessionCalls] = {}
        self.url: str | None = None
        self._runner: web.AppRunner | None = None
        self._http: ClientSession | None = None

    async def start(self) -> str:
        """Listen; return the root URL agents use (``{url}/sessions/{sid}/v1``)."""
        if self.url is not None:
            return self.url
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_route("*", "/sessions/{sid}/v1{tail:.*}", self._relay)
        # handler_cancellation: an agent that hangs up cancels the upstream call too
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, backlog=2048)
        await site.start()
        port = self._runner.addresses[0][1]  # the bound (host, port) of the one site
        self._http = ClientSession(timeout=ClientTimeout(total=None, sock_connect=30))
        self.url = f"http://{self.host}:{port}"
        return self.url

    async def stop(self) -> None:
        """Stop listening and close the upstream client. Idempotent."""
        if self._http is not None:
            await self._http.close()
            self._http = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self.url = None

    def open(self, sid: str) -> None:
        """Accept calls for ``sid`` (calls for sessions not opened get a 404)."""
        self.sessions[sid] = SessionCalls()

    def close(self, sid: str) -> None:
        """Stop accepting calls for ``sid``."""
        self.sessions.pop(sid, None)

    async def _relay(self, request: web.Request) -> web.StreamResponse:
        sid, tail = request.match_info["sid"], request.match_info["tail"]
        calls = self.sessions.get(sid)
        if calls is None:
            return web.json_response(
                {"error": {"message": f"no open capture session {sid!r}", "type": "not_found"}},
                status=404,
            )
        counted = _is_model_call(request.method, tail)
        url = f"{self.gateway_url}/sessions/{sid}/v1{tail}"
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        body = await request.read()
        assert self._http is not None
        if counted:
            calls.in_flight += 1
        out: web.StreamResponse | None = None
        done = not counted
        try:
            async with self._http.request(
                request.method, url, params=request.query, data=body, headers=headers
            ) as upstream:
                out = web.StreamResponse(status=upstream.status, reason=upstream.reason)
                for k, v in upstream.headers.items():
                    if k.lower() not in _HOP_BY_HOP:
                        out.headers[k] = v
                await out.prepare(request)
                # The agent has its reply once the last bytes it waits for went out, so
                # the call is counted just before them: for SSE the "[DONE]" event (the
                # agent may hang up before the stream's end, cancelling this handler),
                # otherwise the end of the body (written by write_eof below).
                stream = upstream.headers.get("Content-Type", "").startswith("text/event-stream")
                seen = b""
                async for chunk in upstream.content.iter_any():
                    if not done and stream:
                        window = seen + chunk
                        if _DONE in window:
                            done = True
                            calls.settle(upstream.status)
                        seen = window[-len(_DONE) :]
                    await out.write(chunk)
                if not done:
                    done = True
                    calls.settle(upstream.status)
                await out.write_eof()
                return out
        except ClientError as exc:
            log.warning("session %s: relaying %s %s failed: %s", sid, request.method, tail, exc)
            if out is not None and out.prepared:
                raise  # the reply already began: the agent sees the connection drop
            raise web.HTTPBadGateway(text=f"rllm-model-gateway unreachable: {exc}") from exc
        finally:
            if counted and not done:  # never answered (error, or the agent hung up)
                calls.in_flight -= 1
                calls._bump()

    def calls(self, sid: str) -> SessionCalls:
        """The counters of an open session.

        :raises TokenRetrievalError: the session is not open here.
        """
        calls = self.sessions.get(sid)
        if calls is None:
            raise TokenRetrievalError(
                f"capture session {sid!r} is not open (open_session first; closed sessions "
                f"keep no counts)",
                session_id=sid,
            )
        return calls
