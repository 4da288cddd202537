"""The gateway's aiohttp application: model routes for three wire formats, admin routes.

Model routes (session key in ``Authorization: Bearer`` or ``x-api-key``; see
:mod:`.protocols.model_routes`)::

    POST /v1/chat/completions          OpenAI Chat Completions
    POST /v1/responses                 OpenAI Responses
    POST /v1/messages                  Anthropic Messages
    POST /v1/messages/count_tokens     Anthropic token counting
    GET  /v1/models                    the served model (every policy's, with several)

Admin routes (``Authorization: Bearer <admin token>``; see :mod:`.protocols.admin`)::

    POST   /sessions                   open a session → {session_id, api_key, base_url}
    GET    /sessions                   open sessions, and journal sessions a restart can resume
    GET    /sessions/{sid}/traces      the session's TraceRecords so far
    POST   /sessions/{sid}/finish      close it and return its TraceRecords
    DELETE /sessions/{sid}             close it and discard its turns
    PUT    /weight_version             {"version": int | null}

Open routes: ``GET /healthz`` (also ``/health``, as engine servers spell it, for proxies
that health-check their upstream), ``GET /metrics`` (Prometheus text).

A gateway given several policies routes each call by the ``model`` it sends
(:mod:`rollhub_gateway.policies.routes`).

Errors come back in the caller's wire format with the status SDKs expect: 400 (naming
the field; a model name no policy has), 401, 404, 410 (a journal session that cannot be recovered exactly), 413, 429
(per-session concurrency), 502 (engine failure).
"""

from __future__ import annotations

import secrets
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler
from rollhub.policies import PolicyUpdates
from rollhub.sampling import SamplingBackend
from rollhub.trace import TraceRecord

from rollhub_gateway.admission import Admission
from rollhub_gateway.config import GatewayConfig, SessionPolicy
from rollhub_gateway.http.app_server import AppServer
from rollhub_gateway.http.request_head import route_table
from rollhub_gateway.metrics import GatewayMetrics
from rollhub_gateway.model_call.plan import TurnPlanner
from rollhub_gateway.model_call.runner import TurnRunner
from rollhub_gateway.policies.routes import PolicyRoute, PolicyRoutes
from rollhub_gateway.protocols.admin import AdminRoutes
from rollhub_gateway.protocols.model_routes import ModelRoutes
from rollhub_gateway.sessions import Session, SessionManager
from rollhub_gateway.turns import ChatModel

__all__ = ["Gateway"]


class Gateway:
    """One gateway: an engine, a chat model, sessions, metrics, and the HTTP app serving them.

    Use it in process (:meth:`open_session`, :meth:`finish_session`…), mount :meth:`app`
    into another aiohttp application, or serve it with :meth:`start` (see
    :mod:`rollhub_gateway.http.serving` for threaded and standalone serving).

    :param backend: the sampling backend (started by :meth:`start` / the app's startup).
    :param chat_model: renders turns to ids and parses outputs.
    :param config: network, session and limit settings (the model/engine fields are used
        by :func:`~rollhub_gateway.http.serving.build_gateway`, not here).
    :param routes: several policies, each with its own backend (the first is the default
        and should hold ``backend``); None: ``backend`` is the only policy.
    """

    def __init__(
        self,
        backend: SamplingBackend,
        chat_model: ChatModel,
        config: GatewayConfig | None = None,
        *,
        routes: list[PolicyRoute] | None = None,
    ) -> None:
        self.config = config or GatewayConfig()
        self.backend = backend
        self.chat_model = chat_model
        self.admin_token = self.config.admin_token or secrets.token_urlsafe(24)
        self.metrics = GatewayMetrics()
        self.sessions = SessionManager(
            chat_model,
            default_policy=self.config.policy,
            ttl_s=self.config.session_ttl_s,
            reap_interval_s=self.config.reap_interval_s,
            on_close=lambda _s, how: self.metrics.session_closed(how),
        )
        self.metrics.active_sessions = lambda: len(self.sessions)
        self.metrics.drift_counts = self.sessions.drift_totals
        journal = getattr(chat_model, "journal", None)
        if journal is not None:
            self.metrics.journal_corruptions = lambda: dict(journal.corruptions)
        self.metrics.process_drift_counts = _process_drift_counts
        self.weight_version: int | None = None
        self.policies = PolicyRoutes(
            routes or [PolicyRoute(None, chat_model.model_id, backend)],
            version=lambda: self.weight_version,
        )
        self.planner = TurnPlanner(chat_model, weight_version=lambda: self.weight_version,
                                   routes=self.policies)
        self.admission = Admission(self.planner)
        self.runner = TurnRunner(backend, chat_model, self.metrics, log_turns=self.config.log_turns)
        self.url: str | None = None
        self._server: Any = None
        self.admin = AdminRoutes(self)
        self.model_routes = ModelRoutes(self)

    # In-process API ---------------------------------------------------------------------------

    def open_session(
        self,
        session_id: str | None = None,
        *,
        policy: SessionPolicy | dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Session:
        """Open a capture session; give ``session.key`` to the agent as its api key."""
        session = self.sessions.open(session_id, policy=policy, metadata=metadata)
        self.metrics.session_opened()
        return session

    def traces(self, session_id: str) -> list[TraceRecord]:
        """The open session's records (every answered call is in them).

        These three raise :class:`~rollhub_gateway.sessions.SessionError` with reason
        ``engine_failed`` for a session the engine failed under (closing it all the same):
        its agent's outcome is the infrastructure's.
        """
        return self.sessions.traces(session_id)

    def finish_session(self, session_id: str) -> list[TraceRecord]:
        """Close a session and return its records."""
        return self.sessions.finish(session_id)

    def drop_session(self, session_id: str) -> None:
        """Close a session and discard its records."""
        self.sessions.drop(session_id)

    def set_weight_version(self, version: int | None) -> None:
        """The policy version stamped on every turn committed from now on (a backend
        that reports its own version takes it too; with several policies, each has its
        own: see :meth:`publish_policy`)."""
        self.weight_version = version
        if not self.policies.routed:
            self.backend.set_weight_version(version)

    def publish_policy(self, policy: object, version: int) -> None:
        """Sample from a trainer's new ``policy`` as ``version`` from the next turn on.

        ``policy`` is what the backend takes (:meth:`SamplingBackend.update_policy`), or
        per-policy updates (:class:`rollhub.policies.PolicyUpdates`): each policy's to its
        own backend, with its own version.

        :raises UsageError: the backend cannot take a policy; an update for a policy not
            served here or for a frozen one.
        """
        if isinstance(policy, PolicyUpdates):
            self.policies.publish(policy)
        else:
            self.backend.update_policy(policy, version)
        self.set_weight_version(version)

    @property
    def base_url(self) -> str | None:
        """``http://host:port/v1`` once served (OpenAI SDKs); Anthropic SDKs use :attr:`url`."""
        return f"{self.url}/v1" if self.url else None

    async def start(self, host: str | None = None, port: int | None = None) -> str:
        """Serve on the running loop; returns the root URL (``http://host:port``)."""
        if self._server is None:
            self._server = self.app_server(
                self.app(), host or self.config.host, self.config.port if port is None else port
            )
            self.url = await self._server.start()
        return self.url or ""

    def app_server(self, app: web.Application, host: str, port: int) -> AppServer:
        """An :class:`AppServer` of ``app`` (this gateway's, maybe with routes added) whose
        gateway routes take the fast path (:mod:`rollhub_gateway.http.fast_path`)."""
        return AppServer(
            app,
            host,
            port,
            fast_path=route_table(self.routes()),
            max_body_bytes=self.config.max_body_bytes,
            count=self.metrics.request,
        )

    async def stop(self) -> None:
        """Stop serving (sessions stay in memory until finished or dropped)."""
        server, self._server = self._server, None
        if server is not None:
            await server.stop()
        self.url = None

    async def close(self) -> None:
        """Stop serving and close the sampling backends."""
        await self.stop()
        self.admission.close()
        for backend in self.policies.backends():
            await backend.close()

    # The aiohttp application ---------------------------------------------------------------

    def app(self) -> web.Application:
        """A new aiohttp application (mountable as a sub-app) serving this gateway."""
        app = web.Application(client_max_size=self.config.max_body_bytes, middlewares=[self._count])
        for method, path, handler in self.routes():
            if method == "GET":  # HEAD too, as health checks of load balancers send it
                app.router.add_get(path, handler)
            else:
                app.router.add_route(method, path, handler)
        app.on_startup.append(self._on_startup)
        app.on_cleanup.append(self._on_cleanup)
        return app

    def routes(self) -> list[tuple[str, str, Any]]:
        """``(method, path pattern, handler)`` of every route, served by aiohttp and by the
        fast path (:mod:`rollhub_gateway.http.fast_path`)."""
        return [
            *self.model_routes.routes(),
            ("GET", "/healthz", self._healthz),
            ("GET", "/health", self._healthz),  # vLLM's and SGLang's spelling
            ("GET", "/metrics", self._metrics),
            *self.admin.routes(),
        ]

    async def _on_startup(self, _app: web.Application) -> None:
        for backend in self.policies.backends():
            await backend.start()
        self.sessions.start_reaper()

    async def _on_cleanup(self, _app: web.Application) -> None:
        await self.sessions.stop_reaper()

    @web.middleware
    async def _count(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        route = request.match_info.route.resource
        name = route.canonical if route is not None else "unmatched"
        status = 500
        try:
            resp = await handler(request)
            status = resp.status
            return resp
        except web.HTTPException as exc:
            status = exc.status
            raise
        finally:
            self.metrics.request(name, status)

    async def _healthz(self, _request: web.Request) -> web.Response:
        return web.json_response(
            {"status": "ok", "model": self.chat_model.model_id, "sessions": len(self.sessions)}
        )

    async def _metrics(self, _request: web.Request) -> web.Response:
        return web.Response(
            text=self.metrics.render(),
            content_type="text/plain",
            charset="utf-8",
            headers={"X-Content-Type-Options": "nosniff"},
        )

def _process_drift_counts() -> dict[str, int]:
    try:
        from rollhub_gateway.trajectory import global_drift_counts
    except ImportError:  # pragma: no cover - another token path without process counters
        return {}
    return global_drift_counts()
