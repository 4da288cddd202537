"""A pool of gateway replicas behind one token source.

The pool starts N replicas (child processes or Ray actors), each a whole gateway built from
the same config with its own journal file, one shared admin token and a free port. A new
session goes to the least-loaded live replica and stays there: its agent gets that
replica's URL, and its traces, finish and drop go to the same replica. Weight versions and
policies are sent to every live replica. A replica process that dies is started again on
its address (``restarts`` times), with the last policy and version; its journaled sessions
carry on. A Ray replica that dies is restarted by Ray on a live node, at a new address. Sessions it does not bring back, and those of a replica that stays dead, fail
with a :class:`~rollhub_gateway.pool.replica.ReplicaDied` naming it and the cause; the
others' sessions carry on, and new sessions go to the replicas that serve.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections import Counter
from pathlib import Path
from typing import Any

from rollhub.errors import ConfigError, GatewayError, TokenRetrievalError

from rollhub_gateway.config import GatewayConfig, PoolSection
from rollhub_gateway.pool.placement import least_loaded
from rollhub_gateway.pool.replica import Replica

__all__ = ["GatewayPool"]

log = logging.getLogger(__name__)

#: seconds between looks at where Ray replicas run (placement = "ray")
BALANCE_INTERVAL_S = 2.0


class GatewayPool:
    """Replicas of one gateway config, and which replica owns which session.

    :param config: each replica's gateway config (its ``journal_path`` and ``port`` are
        replaced per replica; ``admin_token`` is the pool's, random when unset).
    :param pool: the pool section (size, placement, journals, engine factory).
    :param request_timeout_s: timeout of one admin call.
    """

    def __init__(
        self, config: GatewayConfig, pool: PoolSection, *, request_timeout_s: float = 60.0
    ) -> None:
        self.config = config
        self.pool = pool
        self.request_timeout_s = request_timeout_s
        self.admin_token = config.admin_token or secrets.token_urlsafe(24)
        self.replicas: list[Replica] = []
        self.owner: dict[str, Replica] = {}
        self.weight_version: int | None = None
        self._version_set = False
        self._http: Any = None
        self._inited_ray = False
        self._broadcasts: set[asyncio.Task[Any]] = set()
        self._policy: tuple[object, int] | None = None
        self._balancer: asyncio.Task[None] | None = None

    def spec(self, index: int) -> dict[str, Any]:
        """What replica ``index`` is built from (its own journal file, a free port)."""
        update: dict[str, Any] = {"port": 0, "admin_token": self.admin_token}
        if self.pool.journal_dir:
            update["journal_path"] = str(Path(self.pool.journal_dir) / f"replica-{index}.sqlite")
        config = self.config.model_copy(update=update)
        return {
            "index": index,
            "config": config.model_dump(mode="json"),
            "engine_factory": self.pool.engine_factory,
        }

    async def start(self) -> None:
        """Start every replica (in parallel); on any failure stop them all and raise.

        :raises GatewayError: a replica did not start (its cause in the message).
        """
        import aiohttp

        if self.pool.journal_dir:
            Path(self.pool.journal_dir).mkdir(parents=True, exist_ok=True)
        self._http = aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {self.admin_token}"},
            timeout=aiohttp.ClientTimeout(total=self.request_timeout_s),
        )
        self.replicas = await self._build_replicas()
        results = await asyncio.gather(
            *(r.start(self._http) for r in self.replicas), return_exceptions=True
        )
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            await self.close()
            raise failed[0]
        if self.pool.placement == "ray" and self.pool.ray_spread:
            self._balancer = asyncio.create_task(self._balance())
        log.info(
            "gateway pool: %d %s replica(s) at %s",
            len(self.replicas),
            self.pool.placement,
            ", ".join(r.url or "?" for r in self.replicas),
        )

    async def _build_replicas(self) -> list[Replica]:
        timeout = self.pool.start_timeout_s
        if self.pool.placement == "processes":
            from rollhub_gateway.pool.processes import ProcessReplica

            return [
                ProcessReplica(
                    i,
                    self.spec(i),
                    start_timeout_s=timeout,
                    restarts=self.pool.restarts,
                    on_restart=self._restarted,
                )
                for i in range(self.pool.replicas)
            ]
        try:
            import ray
        except ImportError as exc:
            raise ConfigError(
                "token_source.pool.placement = 'ray' needs Ray: pip install 'rollhub[ray]'",
                field="token_source.pool.placement",
            ) from exc
        from rollhub_gateway.pool.ray_replicas import GatewayActor, RayReplica

        if not ray.is_initialized():
            await asyncio.to_thread(ray.init, address=self.pool.ray_address, log_to_driver=False)
            self._inited_ray = True
        remote_cls = ray.remote(GatewayActor)
        return [
            RayReplica(
                i,
                self.spec(i),
                remote_cls=remote_cls,
                num_cpus=self.pool.num_cpus_per_replica,
                start_timeout_s=timeout,
                restarts=self.pool.restarts,
                spread=self.pool.ray_spread,
                resources=self.pool.ray_resources,
                on_restart=self._restarted,
            )
            for i in range(self.pool.replicas)
        ]

    async def _balance(self) -> None:
        """Ray placement: when a node that may take replicas holds none while another holds
        two or more (a node joined, or came back after its replicas were restarted
        elsewhere), move one replica there, one at a time."""
        from rollhub.runtimes.ray_nodes import NodeTable, in_daemon_thread

        from rollhub_gateway.pool.ray_replicas import RayReplica

        table = NodeTable(self.pool.ray_resources)
        while True:
            await asyncio.sleep(BALANCE_INTERVAL_S)
            try:  # bounded: with the cluster's head gone, ray.nodes() blocks
                await in_daemon_thread(table.refresh, 2.0)
            except Exception as exc:
                log.debug("reading ray's node table failed: %s", exc)
                await asyncio.sleep(30.0)  # the blocked read is left to finish first
                continue
            nodes = {n.node_id for n in table.eligible()}
            serving = [
                r for r in self.replicas
                if isinstance(r, RayReplica) and r.dead is None and not r.restarting
            ]  # fmt: skip
            counts = Counter(r.node_id for r in serving)
            empty = sorted(n for n in nodes if not counts.get(n))
            busiest = max((n for n in counts if n in nodes), key=counts.__getitem__, default=None)
            if not empty or busiest is None or counts[busiest] < 2:
                continue
            mover = min((r for r in serving if r.node_id == busiest), key=lambda r: len(r.live))
            await mover.move_to(empty[0])

    # Sessions -----------------------------------------------------------------------------

    async def open_session(self, session_id: str, policy: dict[str, Any] | None) -> dict[str, Any]:
        """Open ``session_id`` on the least-loaded live replica; returns the admin answer
        (``api_key``, ``base_url``, ``anthropic_base_url``, ``model``).

        A replica that fails to open it (dead, unreachable) is skipped and the next one
        tried; a replica that refuses it (bad policy, duplicate id) fails the call.

        :raises GatewayError: no replica is left.
        :raises TokenRetrievalError: the replica refused the session.
        """
        tried: set[int] = set()
        while True:
            replica = least_loaded(self.replicas, exclude=frozenset(tried))
            replica.live[session_id] = ""  # counted at once: concurrent opens spread out
            replica.opened += 1
            try:
                await self._sync_version(replica)
                data = await replica.call(
                    "POST", "/sessions", json={"session_id": session_id, "policy": policy}
                )
            except TokenRetrievalError as exc:
                replica.live.pop(session_id, None)
                if exc.context.get("status") is not None:
                    raise
                log.warning("session %s: %s; trying another replica", session_id, exc)
                tried.add(replica.index)
                continue
            self.owner[session_id] = replica
            replica.live[session_id] = str(data.get("api_key", ""))
            return data

    def status(self) -> list[dict[str, Any]]:
        """Each replica: where it runs (pid, node), its URL, whether it serves, how often it
        was restarted, and how many sessions its deaths cost."""
        return [
            {
                "index": r.index,
                "where": r.where,
                "url": r.url,
                "dead": r.dead,
                "restarts": max(0, r.starts - 1 - r.moves),
                "moves": r.moves,
                "live_sessions": len(r.live),
                "sessions_lost": len(r.lost),
            }
            for r in self.replicas
        ]

    def replica_of(self, session_id: str) -> Replica | None:
        """The replica that owns ``session_id`` (None: not opened through this pool)."""
        return self.owner.get(session_id)

    async def traces(self, session_id: str) -> list[dict[str, Any]]:
        """The session's records (JSON) from the replica that owns it.

        :raises ReplicaDied: its replica died.
        :raises TokenRetrievalError: unknown session, or the replica answered an error.
        """
        replica = self.owner.get(session_id)
        if replica is None:
            raise TokenRetrievalError(
                f"session {session_id!r} was not opened through this gateway pool",
                session_id=session_id,
            )
        data = await replica.call("GET", f"/sessions/{session_id}/traces", session_id=session_id)
        return list(data["traces"])

    async def close_session(self, session_id: str, *, drop: bool) -> None:
        """Finish or drop the session on its replica; unknown ids are ignored.

        :raises ReplicaDied: its replica died (the session is forgotten all the same).
        """
        replica = self.owner.pop(session_id, None)
        if replica is None:
            return
        # still live during the call: a restart under it counts the session lost, and the
        # call (made again once the replica serves) says so instead of a quiet 404
        try:
            if drop:
                await replica.call(
                    "DELETE", f"/sessions/{session_id}", session_id=session_id, missing_ok=True
                )
            else:
                await replica.call(
                    "POST", f"/sessions/{session_id}/finish", session_id=session_id,
                    missing_ok=True,
                )  # fmt: skip
        finally:
            replica.live.pop(session_id, None)

    # Versions and policies -------------------------------------------------------------------

    def set_weight_version(self, version: int | None) -> None:
        """Tell every live replica (in the background; opens wait for it)."""
        self.weight_version, self._version_set = version, True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # called from sync code: each replica gets it before its next open
            return
        if self._http is None:
            return
        task = loop.create_task(self._broadcast_version())
        self._broadcasts.add(task)
        task.add_done_callback(self._broadcasts.discard)

    async def _broadcast_version(self) -> None:
        await asyncio.gather(
            *(self._sync_version(r) for r in self.replicas if r.dead is None),
            return_exceptions=True,
        )

    async def _sync_version(self, replica: Replica) -> None:
        version = self.weight_version
        if not self._version_set or (replica.version_known and replica.version == version):
            return
        await replica.call("PUT", "/weight_version", json={"version": version})
        replica.version, replica.version_known = version, True

    async def _restarted(self, replica: Replica) -> None:
        """A restarted replica gets the last published policy and the weight version
        before it serves anyone."""
        replica.version_known = False
        if self._policy is not None:
            await replica.publish_policy(*self._policy)
            replica.version, replica.version_known = self._policy[1], True
        await self._sync_version(replica)

    async def publish_policy(self, policy: object, version: int) -> None:
        """Hand ``policy`` to every live replica's backend, then stamp ``version``.

        :raises UsageError: a replica's backend refuses it (or it cannot be sent).
        :raises GatewayError: no replica is alive.
        """
        self._policy = (policy, version)  # what a restarted replica is given again
        # a replica being restarted takes it once it serves (its restart may have sent
        # the previous policy already)
        await asyncio.gather(*(r.wait_serving() for r in self.replicas if r.dead is None))
        live = [r for r in self.replicas if r.dead is None]
        if not live:
            raise GatewayError("no gateway replica is alive to take the policy")
        await asyncio.gather(*(r.publish_policy(policy, version) for r in live))
        for r in live:
            r.version, r.version_known = version, True
        self.weight_version, self._version_set = version, True

    # Lifecycle ---------------------------------------------------------------------------------

    async def close(self) -> None:
        """Stop every replica and the admin client (idempotent)."""
        if self._balancer is not None:
            self._balancer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._balancer
            self._balancer = None
        for task in list(self._broadcasts):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await asyncio.gather(*(r.stop() for r in self.replicas), return_exceptions=True)
        self.owner.clear()
        if self._http is not None:
            await self._http.close()
            self._http = None
        if self._inited_ray:
            from rollhub.runtimes.ray_nodes import shutdown_ray

            self._inited_ray = False
            await shutdown_ray()
