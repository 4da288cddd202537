"""Serving a rollout agent over A2A (JSON-RPC), as AgentCore's A2A protocol expects.

:func:`a2a_app` builds a Starlette app from a :class:`~rollhub.app.RolloutApp` (or any
:class:`~rollhub.a2a.executor.SessionExecutor`): a2a-sdk's JSON-RPC endpoint at ``/``,
the agent card at ``/.well-known/agent-card.json`` and ``GET /ping`` (``HealthyBusy``
while a task is set up or run). AgentCore's A2A contract serves on port 9000. Ended tasks
are let go after a while (:class:`~rollhub.a2a.taskstore.EvictingTaskStore`), so a
long-lived server does not keep every rollout's result, and so are parked tasks whose
client never sent the run (:class:`~rollhub.a2a.handler.RolloutRequestHandler`, which
also sets each context up once).

From the command line (the same image ``rollhub deploy init`` builds, another command)::

    python -m rollhub.a2a agent:app --app-dir . --port 9000
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import math
import os
import sys
import time
from collections.abc import AsyncIterator, Sequence

from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import TaskStore
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from rollhub.a2a.executor import RolloutAppExecutor, ServedApp, SessionExecutor
from rollhub.a2a.handler import RolloutRequestHandler
from rollhub.a2a.taskstore import EvictingTaskStore
from rollhub.a2a.wire import INSTANCE_ENV, INSTANCE_HEADER
from rollhub.errors import ConfigError

__all__ = ["A2A_PORT", "a2a_app", "agent_card", "main"]

log = logging.getLogger(__name__)

#: the port AgentCore's A2A contract serves on
A2A_PORT = 9000


def agent_card(url: str, name: str = "rollhub-agent") -> AgentCard:
    """The card of a rollout agent: one JSON-RPC interface at ``url``, no streaming."""
    return AgentCard(
        name=name,
        description="A reinforcement-learning rollout agent (setup, then run, per task)",
        version="1.0",
        capabilities=AgentCapabilities(streaming=False),
        default_input_modes=["application/json"],
        default_output_modes=["application/json"],
        skills=[
            AgentSkill(id="rollout", name="rollout", description="one rollout", tags=["rollout"])
        ],
        supported_interfaces=[
            AgentInterface(protocol_binding="JSONRPC", protocol_version="1.0", url=url)
        ],
    )


def a2a_app(
    target: object,
    *,
    url: str | None = None,
    name: str = "rollhub-agent",
    task_store: TaskStore | None = None,
) -> Starlette:
    """The A2A app serving ``target``: a ``RolloutApp`` or a ``SessionExecutor``.

    :param url: the URL the card advertises (default ``http://localhost:9000/``).
    :param task_store: where tasks are kept (default: an :class:`EvictingTaskStore`; parked
        tasks are evicted only from one).
    :raises ConfigError: ``target`` is neither.
    """
    if isinstance(target, SessionExecutor):
        executor: SessionExecutor = target
    elif isinstance(target, ServedApp):  # it has rollout_handler and runner
        executor = RolloutAppExecutor(target)
    else:
        raise ConfigError(
            f"cannot serve a {type(target).__name__} over A2A: give a rollhub RolloutApp "
            f"(with @app.rollout_entrypoint) or a SessionExecutor"
        )
    card = agent_card(url or f"http://localhost:{A2A_PORT}/", name)
    store = task_store if task_store is not None else EvictingTaskStore()
    handler = RolloutRequestHandler(agent_executor=executor, task_store=store, agent_card=card)
    started = time.time()
    instance = os.environ.get(INSTANCE_ENV)
    headers = {INSTANCE_HEADER: instance} if instance else None

    async def ping(request: Request) -> JSONResponse:
        return JSONResponse(
            {"status": executor.ping_status().value, "time_of_last_update": int(started)},
            headers=headers,
        )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await handler.stop_sweeping()
            shutdown = getattr(getattr(executor, "app", None), "shutdown", None)
            if shutdown is not None:
                await shutdown()

    routes = [Route("/ping", ping, methods=["GET"]), *create_agent_card_routes(card)]
    routes += create_jsonrpc_routes(request_handler=handler, rpc_url="/")
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.executor = executor
    app.state.task_store = store
    app.state.handler = handler
    return app


def _load(target: str, app_dir: str) -> object:
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"{target!r}: expected module:attribute, e.g. agent:app")
    sys.path.insert(0, os.path.abspath(app_dir))
    return getattr(importlib.import_module(module_name), attr)


def _positive_seconds(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds > 0")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rollhub.a2a module:app [--app-dir D] [--host H] [--port P]
    [--parked-idle-s S]``."""
    parser = argparse.ArgumentParser(prog="python -m rollhub.a2a", description=__doc__)
    parser.add_argument("app", help="module:attribute of the RolloutApp or SessionExecutor")
    parser.add_argument("--app-dir", default=".", help="directory to import the module from")
    parser.add_argument("--host", default=None, help="default: 0.0.0.0 in a container")
    parser.add_argument("--port", type=int, default=A2A_PORT)
    parser.add_argument(
        "--parked-idle-s", type=_positive_seconds, default=None,
        help="evict a set-up task whose client sent nothing for this long (default: a "
        "grace past the rollout's deadline_at, else 3600)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    import uvicorn

    host = args.host
    if host is None:
        in_container = os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv")
        host = "0.0.0.0" if in_container else "127.0.0.1"
    store = EvictingTaskStore(parked_idle_s=args.parked_idle_s)
    app = a2a_app(_load(args.app, args.app_dir), url=f"http://{host}:{args.port}/",
                  task_store=store)  # fmt: skip
    uvicorn.run(app, host=host, port=args.port, log_level="warning")
    return 0
