"""The model routes of a gateway: a model call in one of three wire formats, token
counting and the served models.

Model routes (session key in ``Authorization: Bearer`` or ``x-api-key``)::

    POST /v1/chat/completions          OpenAI Chat Completions
    POST /v1/responses                 OpenAI Responses
    POST /v1/messages                  Anthropic Messages
    POST /v1/messages/count_tokens     Anthropic token counting
    GET  /v1/models                    the served model (every policy's, with several)

A model call is the gateway's pipeline (``docs/architecture.md``): the session of its key,
admission (:mod:`rollhub_gateway.admission`), then the run (:mod:`rollhub_gateway.model_call`),
answered in the caller's wire format, errors included.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from aiohttp import web

from rollhub_gateway.admission import Admission
from rollhub_gateway.model_call.plan import TurnPlan
from rollhub_gateway.model_call.runner import ClientGone, TurnRunner
from rollhub_gateway.policies.routes import PolicyRoutes
from rollhub_gateway.protocols import (
    AnthropicMessages,
    OpenAIChat,
    OpenAIResponses,
    WireAdapter,
    WireError,
    WireRequest,
)
from rollhub_gateway.protocols.admin import AdminRoutes
from rollhub_gateway.protocols.base import error_response, fast_json_response
from rollhub_gateway.sessions import Session, SessionError, SessionManager
from rollhub_gateway.turns import ChatModel

__all__ = ["ModelHost", "ModelRoutes"]

log = logging.getLogger(__name__)

_OPENAI, _RESPONSES, _ANTHROPIC = OpenAIChat(), OpenAIResponses(), AnthropicMessages()


class ModelHost(Protocol):
    """What the model routes serve: a :class:`~rollhub_gateway.gateway.Gateway` (read at
    each call, so a part the gateway replaces is the part its routes use)."""

    chat_model: ChatModel
    sessions: SessionManager
    admission: Admission
    runner: TurnRunner
    policies: PolicyRoutes
    admin: AdminRoutes


class ModelRoutes:
    """The model routes of one gateway.

    :param gateway: the gateway whose sessions, admission and runner serve the calls.
    """

    def __init__(self, gateway: ModelHost) -> None:
        self.gateway = gateway

    def routes(
        self,
    ) -> list[tuple[str, str, Callable[[web.Request], Awaitable[web.StreamResponse]]]]:
        """``(method, path pattern, handler)`` of the model routes."""
        return [
            ("POST", "/v1/chat/completions", self._chat),
            ("POST", "/v1/responses", self._responses),
            ("POST", "/v1/messages", self._messages),
            ("POST", "/v1/messages/count_tokens", self._count_tokens),
            ("GET", "/v1/models", self._models),
        ]

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._model_call(request, _OPENAI, "/v1/chat/completions")

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        return await self._model_call(request, _RESPONSES, "/v1/responses")

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        return await self._model_call(request, _ANTHROPIC, "/v1/messages")

    async def _model_call(
        self, request: web.Request, adapter: WireAdapter, route: str
    ) -> web.StreamResponse:
        try:
            session = self._session(request)
            req, plan = await self.gateway.admission.admit(request, session, adapter, route)
            if not req.stream:
                result = await self.gateway.runner.complete(plan)
                return fast_json_response(adapter.response(req, result))
            return await self._stream(request, adapter, req, plan)
        except WireError as err:
            return error_response(adapter, err)
        except ConnectionResetError:
            raise
        except Exception as exc:  # a bug must still answer in the caller's format
            log.exception("%s failed", route)
            return error_response(adapter, WireError("internal", f"internal gateway error: {exc}"))

    async def _stream(
        self, request: web.Request, adapter: WireAdapter, req: WireRequest, plan: TurnPlan
    ) -> web.StreamResponse:
        stream = self.gateway.runner.stream(plan)
        try:
            await stream.start()  # a 502 before the first byte is still a plain error
            # a request read on the fast path writes its stream to its own connection
            make = getattr(request, "stream_response", web.StreamResponse)
            resp = make(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
            await resp.prepare(request)
            events = stream.events(is_closed=lambda: _gone(request))
            chunks = adapter.stream(req, events)
            try:
                async for chunk in chunks:
                    await resp.write(chunk)
            except WireError as err:
                await resp.write(adapter.stream_error(err))
            except ConnectionResetError:
                raise
            except Exception as exc:  # headers are sent: report in-stream
                log.exception("session %s: streamed call failed", plan.session.session_id)
                internal = WireError("internal", f"internal gateway error: {exc}")
                await resp.write(adapter.stream_error(internal))
            finally:
                await chunks.aclose()
                await events.aclose()
            await resp.write_eof()
            return resp
        except (ConnectionResetError, ClientGone, asyncio.CancelledError) as exc:
            log.info(
                "session %s: client left a streamed call (%s); engine request aborted",
                plan.session.session_id,
                type(exc).__name__,
            )
            raise
        finally:
            await stream.aclose()

    async def _count_tokens(self, request: web.Request) -> web.Response:
        try:
            self._session(request)
            count = await self.gateway.admission.count_tokens(request, _ANTHROPIC)
            return web.json_response({"input_tokens": count})
        except WireError as err:
            return error_response(_ANTHROPIC, err)

    async def _models(self, request: web.Request) -> web.Response:
        adapter = _ANTHROPIC if "anthropic-version" in request.headers else _OPENAI
        try:
            if not self.gateway.admin.is_admin(request):
                self._session(request)
        except WireError as err:
            return error_response(adapter, err)
        ids = [r.model_id for r in self.gateway.policies] if self.gateway.policies.routed else [
            self.gateway.chat_model.model_id
        ]
        entries = [
            {
                "id": mid,
                "object": "model",
                "created": 0,
                "owned_by": "rollhub",
                "type": "model",
                "display_name": mid,
                "created_at": "1970-01-01T00:00:00Z",
            }
            for mid in ids
        ]
        return web.json_response(
            {"object": "list", "data": entries, "has_more": False, "first_id": ids[0],
             "last_id": ids[-1]}
        )

    def _session(self, request: web.Request) -> Session:
        key = request.headers.get("x-api-key")
        if not key:
            auth = request.headers.get("Authorization", "")
            key = auth[7:].strip() if auth[:7].lower() == "bearer " else None
        if not key:
            raise WireError(
                "authentication",
                "missing api key: send the session key as 'Authorization: Bearer <key>' or 'x-api-key'",
            )
        try:
            return self.gateway.sessions.by_key(key)
        except SessionError as exc:
            if exc.context.get("reason") in ("unrecoverable", "lost"):
                raise WireError("gone", str(exc)) from None
            raise WireError(
                "authentication",
                "invalid api key: no open session has this key (unknown, finished, dropped or expired)",
            ) from None


def _gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()
