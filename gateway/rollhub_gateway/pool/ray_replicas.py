"""Gateway replicas as Ray actors spread over a cluster's nodes (``placement = "ray"``).

Each actor runs a :class:`~rollhub_gateway.pool.replica_server.ReplicaServer` on its own
event loop (an async actor) and serves HTTP on its node; agents talk to it directly, the
pool through the admin routes. Actors are scheduled with Ray's ``SPREAD`` strategy, so
replicas land on distinct nodes while there are nodes to spare. A pending ``wait_closed``
call on each actor is the death watch: it fails with Ray's actor error when the actor, its
worker process or its node is lost.

Ray is imported only when a pool with this placement starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from rollhub.errors import GatewayError, UsageError

from rollhub_gateway.pool.replica import Replica

__all__ = ["GatewayActor", "RayReplica"]

log = logging.getLogger(__name__)

#: concurrent calls one actor serves (admin calls; model traffic is HTTP, not actor calls)
ACTOR_CONCURRENCY = 64
#: how long a replica's close may take before the actor is killed
STOP_GRACE_S = 10.0


class GatewayActor:
    """The actor side (wrapped with ``ray.remote`` when a pool starts)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        from rollhub_gateway.pool.replica_server import ReplicaServer

        self.server = ReplicaServer(spec)
        self._closed: asyncio.Event | None = None

    async def serve(self) -> dict[str, Any]:
        """Start the gateway; returns its URL, pid and Ray node id."""
        import os

        import ray

        self._closed = asyncio.Event()
        url = await self.server.start()
        host = self.server.config.host
        if host in ("0.0.0.0", "::"):  # reachable from other nodes at the node's address
            url = url.replace(host if host == "0.0.0.0" else "[::]", ray.util.get_node_ip_address())
        node = ray.get_runtime_context().get_node_id()
        return {"url": url, "pid": os.getpid(), "node_id": node}

    async def publish_policy(self, policy: Any, version: int) -> None:
        """Swap the backend to ``policy`` as ``version``."""
        self.server.publish_policy(policy, version)

    async def wait_closed(self) -> None:
        """Return when :meth:`close` ran (the pool's liveness watch)."""
        assert self._closed is not None
        await self._closed.wait()

    async def close(self) -> None:
        """Stop serving and close the engine."""
        await self.server.close()
        if self._closed is not None:
            self._closed.set()


class RayReplica(Replica):
    """A gateway replica served by a Ray actor.

    :param remote_cls: ``ray.remote(GatewayActor)``, made once per pool.
    """

    kind = "ray actor"

    def __init__(
        self,
        index: int,
        spec: dict[str, Any],
        *,
        remote_cls: Any,
        num_cpus: float,
        start_timeout_s: float,
    ) -> None:
        super().__init__(index)
        self.spec = spec
        self.remote_cls = remote_cls
        self.num_cpus = num_cpus
        self.start_timeout_s = start_timeout_s
        self.handle: Any = None
        self.node_id: str | None = None
        self.pid: int | None = None
        self._watch: asyncio.Task[Any] | None = None
        self._stopping = False

    @property
    def where(self) -> str:
        """``pid <n> on node <id>``."""
        if self.pid is None:
            return "not started"
        return f"pid {self.pid} on node {(self.node_id or '?')[:12]}"

    async def start(self, http: Any) -> None:
        """Create the actor and wait for its URL.

        :raises GatewayError: the actor failed or stayed silent past ``start_timeout_s``.
        """
        self._http = http
        self.handle = self.remote_cls.options(
            num_cpus=self.num_cpus,
            scheduling_strategy="SPREAD",
            max_concurrency=ACTOR_CONCURRENCY,
        ).remote(self.spec)
        try:
            info = await asyncio.wait_for(_await(self.handle.serve.remote()), self.start_timeout_s)
        except TimeoutError:
            await self.stop()
            raise GatewayError(
                f"{self.name} did not serve within {self.start_timeout_s:g}s (no free CPUs on "
                f"the cluster for token_source.pool.num_cpus_per_replica, or a slow model load; "
                f"see token_source.pool.start_timeout_s)"
            ) from None
        except Exception as exc:
            await self.stop()
            raise GatewayError(f"{self.name} failed to start: {_short(exc)}") from exc
        self.url, self.pid, self.node_id = info["url"], info["pid"], info["node_id"]
        self.mark_serving()
        self._watch = asyncio.create_task(self._watch_actor())
        log.info("%s serving at %s", self.name, self.url)

    async def _watch_actor(self) -> None:
        try:
            await _await(self.handle.wait_closed.remote())
        except Exception as exc:
            if not self._stopping:
                self.mark_dead(f"the Ray actor died: {_short(exc)}")

    async def publish_policy(self, policy: Any, version: int) -> None:
        """Send the policy through Ray's object store to the actor.

        :raises UsageError: the actor's backend refuses it.
        """
        self._raise_if_dead(None)
        try:
            await _await(self.handle.publish_policy.remote(policy, version))
        except Exception as exc:
            cause = getattr(exc, "cause", None) or exc
            raise UsageError(f"{self.name} refused the policy: {_short(cause)}") from exc

    async def stop(self) -> None:
        """Close the gateway in the actor, then kill the actor (idempotent)."""
        import ray

        self._stopping = True
        handle, self.handle = self.handle, None
        if handle is not None:
            if self.dead is None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(_await(handle.close.remote()), STOP_GRACE_S)
            with contextlib.suppress(Exception):
                ray.kill(handle)
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
            self._watch = None
        if self.dead is None:
            self.dead = "stopped by the pool"


async def _await(ref: Any) -> Any:
    return await ref


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}"[:300]
