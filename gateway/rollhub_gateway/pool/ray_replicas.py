"""Gateway replicas as Ray actors over a cluster's nodes (``placement = "ray"``).

Each actor runs a :class:`~rollhub_gateway.pool.replica_server.ReplicaServer` on its own
event loop (an async actor) and serves HTTP on its node; agents talk to it directly, the
pool through the admin routes. Placement: Ray's ``SPREAD`` strategy (``ray_spread``), so
replicas land on distinct nodes while there are nodes to spare, limited to the nodes that
offer ``ray_resources`` (a label only worker nodes offer keeps them off the head; a
node's own label pins them to it). A pending ``wait_closed`` call on each actor is the
death watch: it fails with Ray's actor error when the actor, its worker process or its
node is lost.

A replica that dies is restarted by Ray (``max_restarts = restarts``) on a node that has
room, and served again there: a new address, so the sessions it held are lost (their
agents hold the old one) and fail with :class:`~rollhub_gateway.pool.replica.ReplicaDied`
naming the death; the hub runs their episodes again. :attr:`RayReplica.restarts_done`
counts the restarts. A replica killed on purpose (``ray.kill``), or past its restarts,
stays dead. When a node joins (or comes back) while another node holds two or more
replicas, the pool moves one there (:meth:`RayReplica.move_to`): it takes no new session,
and once its sessions ended a new actor is placed on the node; nothing is lost.

Ray is imported only when a pool with this placement starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from rollhub.errors import GatewayError, UsageError

from rollhub_gateway.pool.replica import Replica

if TYPE_CHECKING:
    import aiohttp
    from ray.actor import ActorClass
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

__all__ = ["GatewayActor", "RayReplica"]

log = logging.getLogger(__name__)

T = TypeVar("T")

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
        """Start the gateway; returns its URL, pid, Ray node id and name, and whether Ray
        restarted this actor."""
        import os

        import ray

        self._closed = asyncio.Event()
        url = await self.server.start()
        host = self.server.config.host
        if host in ("0.0.0.0", "::"):  # reachable from other nodes at the node's address
            url = url.replace(host if host == "0.0.0.0" else "[::]", ray.util.get_node_ip_address())
        context = ray.get_runtime_context()
        node = context.get_node_id()
        names = [n.get("NodeName") for n in ray.nodes() if n["NodeID"] == node]
        return {
            "url": url,
            "pid": os.getpid(),
            "node_id": node,
            "node": str(names[0]) if names and names[0] else node[:12],
            "restarted": bool(context.was_current_actor_reconstructed),
        }

    async def publish_policy(self, policy: object, version: int) -> None:
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
    :param restarts: times Ray restarts the actor when it dies (``max_restarts``).
    :param spread: Ray's ``SPREAD`` strategy (else its default scheduler).
    :param resources: custom resources the actor asks for (where it may run).
    :param on_restart: awaited once a restarted replica serves, before anything else
        reaches it (the pool sends the last policy and version).
    """

    kind = "ray actor"

    def __init__(
        self,
        index: int,
        spec: dict[str, Any],
        *,
        remote_cls: ActorClass[GatewayActor],
        num_cpus: float,
        start_timeout_s: float,
        restarts: int = 0,
        spread: bool = True,
        resources: dict[str, float] | None = None,
        on_restart: Callable[[RayReplica], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__(index)
        self.spec = spec
        self.remote_cls = remote_cls
        self.num_cpus = num_cpus
        self.start_timeout_s = start_timeout_s
        self.restarts = restarts
        self.spread = spread
        self.resources = dict(resources or {})
        self.on_restart = on_restart
        self.handle: Any = None
        self.node_id: str | None = None
        self.node: str | None = None
        self.pid: int | None = None
        #: times Ray restarted the actor and it served again
        self.restarts_done = 0
        #: why each earlier incarnation died, and where it ran
        self.deaths: list[str] = []
        #: seconds from each death being noticed to the restarted replica serving
        self.recoveries_s: list[float] = []
        self._watch: asyncio.Task[Any] | None = None
        self._stopping = False

    @property
    def where(self) -> str:
        """``pid <n> on node <name>``."""
        if self.pid is None:
            return "not started"
        return f"pid {self.pid} on node {self.node or (self.node_id or '?')[:12]}"

    async def start(self, http: aiohttp.ClientSession) -> None:
        """Create the actor and wait for its URL.

        :raises GatewayError: the actor failed or stayed silent past ``start_timeout_s``.
        """
        self._http = http
        self.handle = self._new_actor("SPREAD" if self.spread else "DEFAULT")
        try:
            info = await asyncio.wait_for(_await(self.handle.serve.remote()), self.start_timeout_s)
        except TimeoutError:
            await self.stop()
            raise GatewayError(
                f"{self.name} did not serve within {self.start_timeout_s:g}s (no free CPUs on "
                f"the cluster for token_source.pool.num_cpus_per_replica, no node offering "
                f"token_source.pool.ray_resources, or a slow model load; see "
                f"token_source.pool.start_timeout_s)"
            ) from None
        except Exception as exc:
            await self.stop()
            raise GatewayError(f"{self.name} failed to start: {_short(exc)}") from exc
        self._serving_at(info)
        self.mark_serving()
        self._watch = asyncio.create_task(self._watch_actor())
        log.info("%s serving at %s", self.name, self.url)

    def _new_actor(self, strategy: str | NodeAffinitySchedulingStrategy) -> Any:
        return self.remote_cls.options(
            num_cpus=self.num_cpus,
            resources=self.resources or None,
            scheduling_strategy=strategy,
            max_concurrency=ACTOR_CONCURRENCY,
            max_restarts=max(0, self.restarts - self.restarts_done),
        ).remote(self.spec)

    async def move_to(self, node_id: str) -> bool:
        """Serve from node ``node_id`` instead: take no new session, wait until the live
        ones ended, then replace the actor by one placed there. Nothing is lost (a node
        that came back gets its share of replicas again). Whether it moved.
        """
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self.draining = True
        try:
            while self.live and self.dead is None and not self._stopping:
                await asyncio.sleep(0.2)
            if self.dead is not None or self._stopping:
                return False
            self.mark_restarting()
            old, where = self.handle, self.where
            if self._watch is not None:
                self._watch.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._watch
            await _close_actor(old)
            self.handle = self._new_actor(NodeAffinitySchedulingStrategy(node_id, soft=True))
            info = await asyncio.wait_for(_await(self.handle.serve.remote()), self.start_timeout_s)
            self._serving_at(info)
            if self.on_restart is not None:
                await self.on_restart(self)
        except Exception as exc:
            self.mark_dead(f"moving it to another node failed: {_short(exc)}")
            return False
        finally:
            self.draining = False
        self.moves += 1
        self.mark_serving()
        self._watch = asyncio.create_task(self._watch_actor())
        log.info("gateway replica %d moved from %s to %s", self.index, where, self.where)
        return True

    def _serving_at(self, info: dict[str, Any]) -> None:
        self.url, self.pid = info["url"], info["pid"]
        self.node_id, self.node = info["node_id"], info["node"]

    async def _watch_actor(self) -> None:
        while True:
            try:
                await _await(self.handle.wait_closed.remote())
                return
            except Exception as exc:
                if self._stopping:
                    return
                cause = f"the Ray actor died: {_short(exc)}"
            if self.restarts_done >= self.restarts or not await self._restarted(cause):
                self.mark_dead(self.deaths[-1] if self.deaths else cause)
                return

    async def _restarted(self, cause: str) -> bool:
        """Wait for Ray's restart of the actor and serve again; whether it serves.

        Every session it held is lost at once: its agents call the old address.
        """
        self.mark_restarting()
        noticed, old = time.monotonic(), self.name
        self.deaths.append(f"{old} died ({cause})")
        # whatever the restart brings, its sessions are lost (a new actor has a new
        # address): say so at once, so their episodes run again without waiting for it
        why = f"{old} died ({cause}); a restarted Ray replica serves at a new address"
        for sid in list(self.live):
            self.lost[sid] = why
            self.live.pop(sid)
        log.warning("%s died (%s); waiting for Ray to restart it", old, cause)
        deadline = noticed + self.start_timeout_s
        info: dict[str, Any] | None = None
        while info is None and time.monotonic() < deadline and not self._stopping:
            try:  # queued by Ray until the restarted actor is alive
                info = await asyncio.wait_for(
                    _await(self.handle.serve.remote()), max(0.1, deadline - time.monotonic())
                )
            except TimeoutError:
                break
            except Exception as exc:
                if _gone_for_good(exc):  # killed on purpose, or past Ray's restarts
                    self.deaths[-1] += f"; not restarted: {_short(exc)}"
                    return False
                await asyncio.sleep(0.2)  # the dead incarnation answered: not restarted yet
        if info is None:
            self.deaths[-1] += f"; not serving again within {self.start_timeout_s:g}s"
            return False
        self._serving_at(info)
        if self.on_restart is not None:
            try:
                await self.on_restart(self)
            except Exception as exc:
                self.deaths[-1] += f"; the restarted replica refused the policy: {exc}"
                return False
        self.recoveries_s.append(time.monotonic() - noticed)
        # counted with the start it is (mark_serving), once the replica took the policy:
        # the pool's status reads starts, a caller may read restarts_done
        self.restarts_done += 1
        self.mark_serving()
        log.warning(
            "%s serves again after %.1fs (restart %d of %d); %d session(s) lost",
            self.name, self.recoveries_s[-1], self.restarts_done, self.restarts, len(self.lost),
        )  # fmt: skip
        return True

    async def publish_policy(self, policy: object, version: int) -> None:
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
        if handle is not None and self.dead is None and not self.restarting:
            await _close_actor(handle)
        elif handle is not None:
            with contextlib.suppress(Exception):
                ray.kill(handle, no_restart=True)
        if self._watch is not None and self._watch is not asyncio.current_task():
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
            self._watch = None
        if self.dead is None:
            self.dead = "stopped by the pool"
            self._serving.set()


async def _close_actor(handle: Any) -> None:
    """Close the gateway in the actor (bounded), then kill the actor for good."""
    import ray

    with contextlib.suppress(Exception):
        await asyncio.wait_for(_await(handle.close.remote()), STOP_GRACE_S)
    with contextlib.suppress(Exception):
        ray.kill(handle, no_restart=True)


def _gone_for_good(exc: BaseException) -> bool:
    """Whether Ray says the actor will not come back (as opposed to: not back yet)."""
    import ray

    return isinstance(exc, ray.exceptions.ActorDiedError)


async def _await(ref: Awaitable[T]) -> T:
    return await ref


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}"[:300]
