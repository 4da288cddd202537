"""The admin routes of a gateway: opening, reading, finishing and dropping sessions.

All need ``Authorization: Bearer <admin token>``; errors use the OpenAI error shape.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web
from rollhub.errors import ConfigError
from rollhub.trace import TraceRecord

from rollhub_gateway.admission import parse_body, read_body
from rollhub_gateway.protocols.base import WireError, error_response
from rollhub_gateway.protocols.openai_chat import OpenAIChat
from rollhub_gateway.sessions import ENGINE_FAILED, Session, SessionError, SessionManager
from rollhub_gateway.turns import ChatModel

if TYPE_CHECKING:
    from rollhub_gateway.config import SessionPolicy

__all__ = ["AdminRoutes", "SessionHost"]

_OPENAI = OpenAIChat()


class SessionHost(Protocol):
    """What the admin routes manage: a :class:`~rollhub_gateway.gateway.Gateway`."""

    admin_token: str
    chat_model: ChatModel
    sessions: SessionManager

    def open_session(
        self,
        session_id: str | None = None,
        *,
        policy: SessionPolicy | dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Session: ...

    def traces(self, session_id: str) -> list[TraceRecord]: ...

    def finish_session(self, session_id: str) -> list[TraceRecord]: ...

    def drop_session(self, session_id: str) -> None: ...

    def set_weight_version(self, version: int | None) -> None: ...


class AdminRoutes:
    """Session management over HTTP for one gateway (the hub's side of the API)."""

    def __init__(self, gateway: SessionHost) -> None:
        self.gateway = gateway

    def routes(self) -> list[tuple[str, str, Callable[[web.Request], Awaitable[web.Response]]]]:
        """``(method, path pattern, handler)`` of the admin routes."""
        return [
            ("POST", "/sessions", self.open_session),
            ("GET", "/sessions", self.list_sessions),
            ("GET", "/sessions/{sid}/traces", self.traces),
            ("POST", "/sessions/{sid}/finish", self.finish),
            ("DELETE", "/sessions/{sid}", self.drop),
            ("PUT", "/weight_version", self.weight_version),
            ("POST", "/sessions/lost", self.lost_sessions),
        ]

    def is_admin(self, request: web.Request) -> bool:
        auth = request.headers.get("Authorization", "")
        token = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
        return bool(token) and secrets.compare_digest(
            token.encode(), self.gateway.admin_token.encode()
        )

    def _check(self, request: web.Request) -> None:
        if not self.is_admin(request):
            raise WireError(
                "authentication", "admin routes need 'Authorization: Bearer <admin token>'"
            )

    async def open_session(self, request: web.Request) -> web.Response:
        try:
            self._check(request)
            body = await body_json(request, allow_empty=True)
            sid = body.get("session_id")
            if sid is not None and (not isinstance(sid, str) or not sid):
                raise WireError(
                    "invalid_request", "'session_id' must be a non-empty string", param="session_id"
                )
            policy = body.get("policy")
            if policy is not None and not isinstance(policy, dict):
                raise WireError("invalid_request", "'policy' must be an object", param="policy")
            try:
                session = self.gateway.open_session(
                    sid, policy=policy, metadata=body.get("metadata")
                )
            except ConfigError as exc:
                raise WireError(
                    "invalid_request", str(exc), param=exc.context.get("field")
                ) from None
            except SessionError as exc:
                raise _session_error(exc, "invalid_request", param="session_id") from None
        except WireError as err:
            return error_response(_OPENAI, err)
        root = f"{request.scheme}://{request.host}{request.path.removesuffix('/sessions')}"
        return web.json_response(
            {
                "session_id": session.session_id,
                "api_key": session.key,
                "base_url": f"{root}/v1",
                "anthropic_base_url": root,
                "model": self.gateway.chat_model.model_id,
            },
            status=201,
        )

    async def list_sessions(self, request: web.Request) -> web.Response:
        try:
            self._check(request)
        except WireError as err:
            return error_response(_OPENAI, err)
        now = time.monotonic()
        open_ = [
            {
                "session_id": s.session_id,
                "turns": s.turns,
                "in_flight": s.in_flight,
                "idle_s": round(now - s.last_used, 3),
            }
            for s in self.gateway.sessions.sessions()
        ]
        journal = getattr(self.gateway.chat_model, "open_sessions", None)
        unfinished = journal() if callable(journal) else []
        recoverable = sorted(set(unfinished) - {s["session_id"] for s in open_})
        return web.json_response({"open": open_, "recoverable": recoverable})

    async def traces(self, request: web.Request) -> web.Response:
        return await self._records(request, self.gateway.traces)

    async def finish(self, request: web.Request) -> web.Response:
        return await self._records(request, self.gateway.finish_session)

    async def _records(
        self, request: web.Request, get: Callable[[str], list[TraceRecord]]
    ) -> web.Response:
        sid = request.match_info["sid"]
        try:
            self._check(request)
            try:
                records = get(sid)
            except SessionError as exc:
                raise _session_error(exc, "not_found") from None
        except WireError as err:
            return error_response(_OPENAI, err)
        return web.json_response(
            {"session_id": sid, "traces": [r.model_dump(mode="json") for r in records]}
        )

    async def drop(self, request: web.Request) -> web.Response:
        sid = request.match_info["sid"]
        try:
            self._check(request)
            try:
                self.gateway.drop_session(sid)
            except SessionError as exc:
                raise _session_error(exc, "not_found") from None
        except WireError as err:
            return error_response(_OPENAI, err)
        return web.Response(status=204)

    async def lost_sessions(self, request: web.Request) -> web.Response:
        """``{"sessions": [{"api_key", "reason"}]}``: sessions a gateway pool lost with an
        earlier process of this replica; their agents' calls get a 410 with the reason."""
        try:
            self._check(request)
            body = await body_json(request)
            entries = body.get("sessions")
            if not isinstance(entries, list) or not all(
                isinstance(e, dict)
                and isinstance(e.get("api_key"), str)
                and isinstance(e.get("reason"), str)
                for e in entries
            ):
                raise WireError(
                    "invalid_request",
                    "'sessions' must be a list of {api_key, reason} strings",
                    param="sessions",
                )
        except WireError as err:
            return error_response(_OPENAI, err)
        for e in entries:
            self.gateway.sessions.mark_lost(e["api_key"], e["reason"][:2000])
        return web.json_response({"lost": len(entries)})

    async def weight_version(self, request: web.Request) -> web.Response:
        try:
            self._check(request)
            body = await body_json(request)
            version = body.get("version")
            if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
                raise WireError(
                    "invalid_request", "'version' must be an integer or null", param="version"
                )
        except WireError as err:
            return error_response(_OPENAI, err)
        self.gateway.set_weight_version(version)
        return web.json_response({"version": version})


async def body_json(request: web.Request, *, allow_empty: bool = False) -> dict[str, Any]:
    """The JSON object body; 413 past ``client_max_size``, 400 when it is not an object."""
    return parse_body(await read_body(request), allow_empty=allow_empty)


def _session_error(exc: SessionError, kind: str, *, param: str | None = None) -> WireError:
    """410 for a session whose capture is lost (a journal session that cannot be
    recovered exactly, one the engine failed under), else ``kind``."""
    if exc.context.get("reason") in ("unrecoverable", ENGINE_FAILED):
        return WireError("gone", str(exc), param="session_id")
    return WireError(kind, str(exc), param=param)
