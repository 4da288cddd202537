"""The replica's own side: build one gateway from the pool's spec and serve it.

Used in a child process (``python -m rollhub_gateway.pool.replica_server``, the spec as
one JSON line on stdin) and inside a Ray actor. Besides the gateway's routes, a replica
serves ``POST /pool/policy`` (admin token; body: a pickled ``(policy, version)``), so a
trainer's policy object reaches replicas that run in other processes.

A child process exits when its stdin reaches EOF (the pool closed it, or the pool's process
died), on SIGTERM, and, on Linux, when the thread that started it ends
(``PR_SET_PDEATHSIG``): a replica never outlives the pool that started it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import pickle
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeAlias

from aiohttp import web
from rollhub.errors import ConfigError, RollhubError
from rollhub.lifetimes.parent_death import die_with_parent
from rollhub.sampling import SamplingBackend

from rollhub_gateway.config import GatewayConfig
from rollhub_gateway.http.serving import build_gateway, settle_heap
from rollhub_gateway.pool.replica import POLICY_ROUTE

__all__ = ["ReplicaServer", "load_factory", "main"]

#: builds a replica's sampling backend from its config (``token_source.pool.engine_factory``)
EngineFactory: TypeAlias = Callable[[GatewayConfig], SamplingBackend]

log = logging.getLogger(__name__)


class ReplicaServer:
    """One replica: a gateway built from ``spec`` and served on ``spec["config"]``'s host.

    :param spec: ``{"index": int, "config": GatewayConfig fields, "engine_factory": str|None}``.
    """

    def __init__(self, spec: dict[str, Any]) -> None:
        self.index = int(spec["index"])
        self.config = GatewayConfig.model_validate(spec["config"])
        self.engine_factory: str | None = spec.get("engine_factory")
        self.gateway: Any = None
        self._server: Any = None

    async def start(self) -> str:
        """Build the engine and gateway, serve them; returns the root URL."""
        backend = None
        if self.engine_factory:
            backend = load_factory(self.engine_factory)(self.config)
        self.gateway = build_gateway(self.config, backend=backend)
        app = self.gateway.app()
        app.router.add_post(POLICY_ROUTE, self._policy)
        self._server = self.gateway.app_server(app, self.config.host, self.config.port)
        url = await self._server.start()
        self.gateway.url = url
        settle_heap()  # a replica's process serves this gateway only, like `gateway serve`
        log.info("gateway replica %d serving at %s (pid %d)", self.index, url, os.getpid())
        return url

    def publish_policy(self, policy: object, version: int) -> None:
        """Swap the backend to ``policy`` and stamp ``version`` from the next turn on."""
        self.gateway.backend.update_policy(policy, version)
        self.gateway.set_weight_version(version)

    async def close(self) -> None:
        """Stop serving and close the engine (idempotent)."""
        server, self._server = self._server, None
        if server is not None:
            await server.stop()
        if self.gateway is not None:
            gateway, self.gateway = self.gateway, None
            await gateway.close()

    async def _policy(self, request: web.Request) -> web.Response:
        if not self.gateway.admin.is_admin(request):
            return _error(401, "authentication", "needs 'Authorization: Bearer <admin token>'")
        try:
            # only the admin token's holder (the pool) can get here
            policy, version = pickle.loads(await request.read())
            self.publish_policy(policy, int(version))
        except RollhubError as exc:
            return _error(400, type(exc).__name__, str(exc))
        except Exception as exc:
            log.exception("replica %d: policy update failed", self.index)
            return _error(500, type(exc).__name__, f"{type(exc).__name__}: {exc}")
        return web.json_response({"version": version})


def load_factory(ref: str) -> EngineFactory:
    """The callable named by ``"pkg.module:name"`` or ``"path/to/file.py:name"``.

    :raises ConfigError: it cannot be imported or is not callable (naming the option).
    """
    from rollhub.runtimes.local_worker import load_app

    try:
        factory = load_app(ref) if ref.partition(":")[2] else None
    except ImportError as exc:
        reason = str(exc).split(";")[0]  # the loader's hint is about agent apps
        raise ConfigError(
            f"token_source.pool.engine_factory = {ref!r} cannot be imported: {reason}",
            field="token_source.pool.engine_factory",
        ) from exc
    if not callable(factory):
        raise ConfigError(
            f"token_source.pool.engine_factory = {ref!r} must name a callable taking the "
            f"replica's GatewayConfig and returning a SamplingBackend",
            field="token_source.pool.engine_factory",
        )
    return factory


def _error(status: int, kind: str, message: str) -> web.Response:
    return web.json_response({"error": {"type": kind, "message": message}}, status=status)


def main() -> int:
    """Child-process entry point: read the spec line, serve until stdin closes or SIGTERM."""
    logging.basicConfig(
        level=os.environ.get("ROLLHUB_LOG_LEVEL", "WARNING"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    parent = os.getppid()
    die_with_parent(parent, watchdog=False)  # stdin EOF is its watchdog
    line = sys.stdin.readline()
    if not line:
        return 1
    spec = json.loads(line)
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(_serve(ReplicaServer(spec)))
    return 0


async def _serve(server: ReplicaServer) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)

    def wait_for_eof() -> None:  # returns when the pool closes stdin or its process dies
        sys.stdin.read()
        with contextlib.suppress(RuntimeError):  # the loop may be gone already
            loop.call_soon_threadsafe(stop.set)

    # a daemon thread, not the loop's executor: a blocked read must never hold up exit
    threading.Thread(target=wait_for_eof, name="pool-stdin", daemon=True).start()
    try:
        url = await server.start()
        print(json.dumps({"url": url, "pid": os.getpid()}), flush=True)
        await stop.wait()
    except Exception:
        log.exception("gateway replica %d failed", server.index)
        return 1
    finally:
        await server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
