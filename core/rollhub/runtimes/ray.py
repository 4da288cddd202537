"""``ray``: rollouts as calls on a pool of async Ray actors, for clusters without AWS.

Each actor loads the user's RolloutApp once and runs rollouts through the app's own runner
(:mod:`rollhub.runtimes.ray_actor`), so results are the same documents in the same store.
Sessions go to the least-loaded actor (:mod:`rollhub.runtimes.ray_pool`).

Placement: with ``spread`` each actor starts on the eligible node with the fewest actors
(Ray node affinity); ``resources`` limits the eligible nodes to those offering them (e.g.
``{rollhub_worker = 0.001}``: never the head). Receipts name the node
(``details["node"]``); episodes keep it in ``metrics["node"]``.

Faults: a rollout whose actor dies (its process is killed, its node is lost) is reported
lost (the client runs it again on another actor), the actor's node is avoided until Ray
declares it dead or it proves alive, and a replacement starts on a live node. An idle
actor that dies is replaced too: its lifeline call fails when its process goes, and Ray's
node table calling its node dead is enough. A node that
joins (or comes back) while another holds two or more actors gets one: a new actor starts
there and an actor of the busiest node stops taking sessions and is retired once its
rollouts end. The head is probed every second; when it has not answered for
``head_timeout_s``, the runtime's :attr:`~rollhub.runtime.Runtime.failure` is a
:class:`~rollhub.errors.ClusterLost` and the run stops with it.

Ray is optional (``pip install 'rollhub[ray]'``) and imported only when the runtime starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Coroutine
from typing import Any, ClassVar

from rollhub.errors import ClusterLost, ConfigError, SubmissionError
from rollhub.rollout import RolloutRequest, SubmitReceipt
from rollhub.runtime import Runtime, RuntimeOptions
from rollhub.runtimes import ray_nodes
from rollhub.runtimes.ray_errors import submit_error
from rollhub.runtimes.ray_nodes import HeadProbe, NodeTable
from rollhub.runtimes.ray_options import RayRuntimeOptions
from rollhub.runtimes.ray_pool import CONTROL, ActorPool, PoolActor

__all__ = ["RayRuntime", "RayRuntimeOptions"]

log = logging.getLogger(__name__)

#: seconds between looks at the head and the node table
WATCH_INTERVAL_S = 1.0


class RayRuntime(Runtime):
    """A pool of Ray actors serving the user's app.

    :param options: :class:`RayRuntimeOptions`, or its fields as keywords.
    :param base_dir: directory a relative ``app`` path is resolved against.
    """

    name: ClassVar[str] = "ray"
    Options: ClassVar[type[RuntimeOptions]] = RayRuntimeOptions

    def __init__(self, options: RayRuntimeOptions | None = None, *,
                 base_dir: str | os.PathLike[str] | None = None, **fields: Any) -> None:
        super().__init__(options, **fields)
        self.options: RayRuntimeOptions
        self._base_dir = base_dir
        self._where: dict[str, PoolActor] = {}
        self._watchers: set[asyncio.Task[Any]] = set()
        self._inited_ray = False
        self._started = False
        self.nodes = NodeTable(self.options.resources)
        #: the rollout actors
        self.pool = ActorPool(self.options, self.nodes)
        self._head: HeadProbe | None = None
        #: actors moved to a node that joined (or came back)
        self.actors_moved = 0

    @property
    def actors_started(self) -> int:
        """Actors created so far, replacements included."""
        return self.pool.started

    @property
    def loopback_callbacks(self) -> bool:  # type: ignore[override]  # computed here, a plain attribute in Runtime
        """Callbacks to 127.0.0.1 reach this process only on a cluster of this machine."""
        addr = self.options.address or os.environ.get("RAY_ADDRESS")
        return (
            addr is None or addr in ("local", "auto") or addr.startswith(("127.0.0.1", "localhost"))
        )

    @property
    def app_ref(self) -> str:
        """The app reference with a relative file path made absolute."""
        from rollhub.runtimes.local import LocalRuntime

        return LocalRuntime(app=self.options.app, base_dir=self._base_dir).app_ref

    async def start(self) -> None:
        """Connect to (or start) Ray and create the actors."""
        if self._started:
            return
        try:
            import ray
        except ImportError as exc:
            raise ConfigError("the ray runtime needs Ray: pip install 'rollhub[ray]'") from exc

        if not ray.is_initialized():
            env = {"env_vars": dict(self.options.env)} if self.options.env else None
            await asyncio.to_thread(
                ray.init, address=self.options.address, runtime_env=env, log_to_driver=False
            )
            self._inited_ray = True
        self.pool.bind(self.app_ref)
        self._head = HeadProbe(ray_nodes.gcs_address(), self.options.head_timeout_s)
        self._started = True
        try:
            await asyncio.to_thread(self.nodes.refresh)
            self._check_resources()
            for _ in range(self.options.actors):  # one by one: each lands on the emptiest node
                await self._spawn()
        except BaseException:
            await self.close()
            raise
        self._track(self._head.watch(self._lose_cluster, WATCH_INTERVAL_S))
        self._track(self._watch_nodes())
        log.info("ray runtime: %d actors on %s", len(self.pool.actors), self.placement())

    def _check_resources(self) -> None:
        if self.options.resources and not self.nodes.eligible():
            offered = sorted({k for n in self.nodes.nodes.values() for k in n.resources})
            raise ConfigError(
                f"no live Ray node offers runtime.resources = {self.options.resources}; the "
                f"cluster's resources: {', '.join(offered)}",
                field="runtime.resources",
            )

    async def _spawn(self, node_id: str | None = None) -> PoolActor:
        actor = await self.pool.spawn(node_id, closing=lambda: not self._started)
        self._track(self._hold_lifeline(actor))
        return actor

    async def _hold_lifeline(self, actor: PoolActor) -> None:
        # a crash, the kernel's OOM killer or a lost node: any end of the call is a death
        with contextlib.suppress(Exception):
            await self.pool.lifeline(actor)
        await self._replace(actor)

    def placement(self) -> dict[str, int]:
        """Live actors per node name (draining ones left out)."""
        return self.pool.placement()

    async def submit(self, request: RolloutRequest) -> SubmitReceipt:
        """Call ``run`` on the least-loaded actor; returns at once."""
        if self.failure is not None:
            raise SubmissionError(str(self.failure), transient=False)
        if not self._started:
            raise SubmissionError("the ray runtime is not started", transient=False)
        actor = self.pool.least_loaded()
        if actor is None:
            raise SubmissionError(
                "no ray actor is alive; replacements are starting", transient=True
            )
        sid = request.rollout.session_id
        actor.sessions[sid] = None
        self._where[sid] = actor
        try:
            # Like POST /invocations: the receipt comes once the actor has started the
            # rollout, so a cancel right after it always finds the session.
            location = await actor.handle.start.options(concurrency_group=CONTROL).remote(
                request.to_wire()
            )
            ref = actor.handle.wait.remote(sid)
        except Exception as exc:
            self._forget(sid)
            error = submit_error(exc, actor.index, actor.node, sid)
            if error.transient:
                self._track(self._replace(actor))
            raise error from exc
        actor.sessions[sid] = ref
        self._track(self._watch(actor, sid, ref))
        return SubmitReceipt(
            session_id=sid,
            result_location=str(location),
            runtime=self.name,
            details={"actor": actor.index, "node": actor.node},
        )

    def _track(self, coro: Coroutine[object, object, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._watchers.add(task)
        task.add_done_callback(self._watchers.discard)

    async def _watch(self, actor: PoolActor, sid: str, ref: Awaitable[object]) -> None:
        import ray

        try:
            await ref
        except (
            ray.exceptions.RayActorError,
            ray.exceptions.WorkerCrashedError,
            ray.exceptions.ObjectLostError,
        ) as exc:
            self._forget(sid)
            self._report_lost(
                sid, f"ray actor {actor.index} on node {actor.node} died: {type(exc).__name__}"
            )
            await self._replace(actor)
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a rollhub bug inside run(): no result will come
            log.error("ray rollout %s failed outside the handler: %s", sid, exc)
            self._forget(sid)
            self._report_lost(sid, f"ray rollout failed: {type(exc).__name__}: {exc}")
            return
        self._forget(sid)

    async def _replace(self, actor: PoolActor) -> None:
        if not actor.alive or not self._started:
            return
        self.pool.remove(actor)
        # an actor Ray called unavailable may still run: it must not outlive its sessions
        self.pool.kill(actor)
        if not self.nodes.gone(actor.node_id):  # its node may be going: start nothing there
            self.nodes.suspect(actor.node_id)
        if actor.draining:  # it was leaving anyway
            return
        log.warning("ray actor %d on node %s died; starting a replacement", actor.index, actor.node)
        try:
            await self._spawn()
        except Exception as exc:
            log.error("replacing ray actor %d failed: %s", actor.index, exc)

    async def _watch_nodes(self) -> None:
        """Every second, while the head answers: did a node die, join or come back?"""
        assert self._head is not None
        while self._started:
            await asyncio.sleep(WATCH_INTERVAL_S)
            if self._head.lost_for:
                continue
            try:  # bounded: should the head go meanwhile, ray.nodes() blocks
                joined = await ray_nodes.in_daemon_thread(self.nodes.refresh, 2 * WATCH_INTERVAL_S)
            except Exception as exc:
                log.debug("reading ray's node table failed: %s", exc)
                continue
            # should a lifeline's failure lag its node's death, the node table says it
            for actor in [a for a in self.pool.actors if a.alive and self.nodes.gone(a.node_id)]:
                self._track(self._replace(actor))
            for node in joined:
                await self._rebalance(node.node_id)
            self.pool.retire_drained()

    def _lose_cluster(self) -> None:
        assert self._head is not None
        self.failure = ClusterLost(
            f"the Ray cluster's head at {self._head.address} has not answered for "
            f"{self._head.lost_for:.0f} s (runtime.head_timeout_s = "
            f"{self.options.head_timeout_s:g}); the run stops here: start a head again (and "
            f"point RAY_ADDRESS or runtime.address at it); a training run continues from its "
            f"last checkpoint.",
            address=self._head.address,
        )
        log.error("%s", self.failure)
        for sid in list(self._where):
            self._forget(sid)
            self._report_lost(sid, str(self.failure))

    async def _rebalance(self, node_id: str) -> None:
        """A node joined: give it an actor if another node holds two or more."""
        counts = self.pool.counts()
        if not self.options.spread or counts.get(node_id, 0) or max(counts.values(), default=0) < 2:
            return
        busiest = max(counts, key=lambda n: counts[n])
        moving = min(
            (a for a in self.pool.actors if a.node_id == busiest and a.alive and not a.draining),
            key=lambda a: len(a.sessions),
        )
        try:
            new = await self._spawn(node_id)
        except Exception as exc:
            log.warning("no actor started on the node that joined: %s", exc)
            return
        moving.draining = True
        self.actors_moved += 1
        log.info(
            "ray node %s joined: actor %d started there; actor %d on %s retires",
            new.node, new.index, moving.index, moving.node,
        )  # fmt: skip
        self.pool.retire_drained()

    async def cancel(self, session_id: str) -> None:
        """Cancel the rollout in its actor and wait until its result is stored."""
        actor = self._where.get(session_id)
        if actor is None or not actor.alive:
            return
        try:
            await actor.handle.cancel.options(concurrency_group=CONTROL).remote(session_id)
        except Exception as exc:
            log.debug("cancel of %s failed: %s", session_id, exc)

    async def finish(self, session_id: str) -> None:
        """The result is stored and the actor's run ended on its own: nothing to free."""
        self._forget(session_id)

    def _forget(self, session_id: str) -> None:
        actor = self._where.pop(session_id, None)
        if actor is not None:
            actor.sessions.pop(session_id, None)

    def load(self) -> dict[int, int]:
        """Rollouts in flight per live actor."""
        return {a.index: len(a.sessions) for a in self.pool.actors if a.alive}

    async def close(self) -> None:
        """Kill the actors; shut Ray down if this runtime started it (bounded when the
        head is gone: Ray's shutdown then waits on it)."""
        if not self._started:
            return
        self._started = False
        for task in list(self._watchers):
            task.cancel()
        self.pool.kill_all()
        self._where.clear()
        if self._inited_ray:
            self._inited_ray = False
            await ray_nodes.shutdown_ray()
