"""``ray``: rollouts as calls on a pool of async Ray actors, for clusters without AWS.

Each actor loads the user's RolloutApp once and runs rollouts through the app's own runner
(:mod:`rollhub.runtimes.ray_actor`), so results are the same documents in the same store.
Sessions go to the least-loaded actor.

Placement: with ``spread`` each actor starts on the eligible node with the fewest actors
(Ray node affinity); ``resources`` limits the eligible nodes to those offering them (e.g.
``{rollhub_worker = 0.001}``: never the head). Receipts name the node
(``details["node"]``); episodes keep it in ``metrics["node"]``.

Faults: a rollout whose actor dies (its process is killed, its node is lost) is reported
lost (the client runs it again on another actor), the actor's node is avoided until Ray
declares it dead or it proves alive, and a replacement starts on a live node; an idle
actor is replaced once Ray's node table calls its node dead. A node that
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
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, ClassVar

from rollhub.errors import ClusterLost, ConfigError, SubmissionError
from rollhub.rollout import RolloutRequest, SubmitReceipt
from rollhub.runtime import Runtime, RuntimeOptions
from rollhub.runtimes import ray_nodes
from rollhub.runtimes.ray_errors import submit_error
from rollhub.runtimes.ray_nodes import HeadProbe, NodeTable
from rollhub.runtimes.ray_options import RayRuntimeOptions

__all__ = ["RayRuntime", "RayRuntimeOptions"]

log = logging.getLogger(__name__)

#: the actors' concurrency group for start and cancel calls, and its size
CONTROL = "control"
CONTROL_SLOTS = 16
#: seconds between looks at the head and the node table
WATCH_INTERVAL_S = 1.0


@dataclass
class _Actor:
    index: int
    handle: Any
    node_id: str | None = None
    node: str = "?"
    sessions: dict[str, Any] = field(default_factory=dict)  # session id -> ObjectRef
    alive: bool = True
    #: takes no new session; killed once its rollouts end (its node gave one away)
    draining: bool = False


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
        self._actors: list[_Actor] = []
        self._where: dict[str, _Actor] = {}
        self._watchers: set[asyncio.Task[Any]] = set()
        self._remote_cls: Any = None
        self._inited_ray = False
        self._started = False
        self._next = 0
        self.nodes = NodeTable(self.options.resources)
        self._head: HeadProbe | None = None
        #: actors created so far, replacements included
        self.actors_started = 0
        #: actors moved to a node that joined (or came back)
        self.actors_moved = 0

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
        from rollhub.runtimes.ray_actor import RolloutActor

        if not ray.is_initialized():
            env = {"env_vars": dict(self.options.env)} if self.options.env else None
            await asyncio.to_thread(
                ray.init, address=self.options.address, runtime_env=env, log_to_driver=False
            )
            self._inited_ray = True
        # Starts and cancels run in their own group, so they are served even when every
        # rollout slot of the default group is waiting on a long rollout.
        # ray.remote accepts concurrency_groups, but its typed overloads leave the option out
        remote: Callable[..., Any] = ray.remote
        self._remote_cls = remote(concurrency_groups={CONTROL: CONTROL_SLOTS})(RolloutActor)
        self._head = HeadProbe(ray_nodes.gcs_address(), self.options.head_timeout_s)
        self._started = True
        try:
            await asyncio.to_thread(self.nodes.refresh)
            self._check_resources()
            for _ in range(self.options.actors):  # one by one: each lands on the emptiest node
                self._actors.append(await self._spawn())
        except BaseException:
            await self.close()
            raise
        self._track(self._head.watch(self._lose_cluster, WATCH_INTERVAL_S))
        self._track(self._watch_nodes())
        log.info("ray runtime: %d actors on %s", len(self._actors), self.placement())

    def _check_resources(self) -> None:
        if self.options.resources and not self.nodes.eligible():
            offered = sorted({k for n in self.nodes.nodes.values() for k in n.resources})
            raise ConfigError(
                f"no live Ray node offers runtime.resources = {self.options.resources}; the "
                f"cluster's resources: {', '.join(offered)}",
                field="runtime.resources",
            )

    async def _spawn(self, node_id: str | None = None) -> _Actor:
        """Start one actor (on ``node_id``, else the emptiest eligible node) and wait until
        it has loaded the app; a node that dies under it is avoided and another tried."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        while True:
            if node_id is None and self.options.spread:
                picked = self.nodes.pick(self._counts())
                node_id = picked.node_id if picked is not None else None
            strategy: Any = "DEFAULT"
            if node_id is not None:
                strategy = NodeAffinitySchedulingStrategy(node_id=node_id, soft=True)
            index, self._next = self._next, self._next + 1
            handle = self._remote_cls.options(
                max_concurrency=self.options.max_concurrency_per_actor,
                num_cpus=self.options.num_cpus_per_actor,
                resources=self.options.resources or None,
                scheduling_strategy=strategy,
            ).remote(self.app_ref)
            try:
                info = await asyncio.wait_for(handle.ready.remote(), self.options.start_timeout_s)
            except Exception as exc:
                with contextlib.suppress(Exception):
                    ray.kill(handle)
                # closing, or the app itself failed to load: another node will not help
                if not self._started or getattr(exc, "actor_init_failed", False):
                    raise
                log.warning(
                    "ray actor %d did not start on node %s (%s); trying another node",
                    index, self.nodes.name(node_id), type(exc).__name__,
                )  # fmt: skip
                self.nodes.suspect(node_id)
                node_id = None
                await asyncio.sleep(0.5)
                continue
            self.actors_started += 1
            node = str(info["node_id"])
            return _Actor(index, handle, node_id=node, node=self.nodes.name(node))

    def _counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for a in self._actors:
            if a.alive and not a.draining and a.node_id is not None:
                counts[a.node_id] = counts.get(a.node_id, 0) + 1
        return counts

    def placement(self) -> dict[str, int]:
        """Live actors per node name (draining ones left out)."""
        return {self.nodes.name(k): v for k, v in sorted(self._counts().items())}

    async def submit(self, request: RolloutRequest) -> SubmitReceipt:
        """Call ``run`` on the least-loaded actor; returns at once."""
        if self.failure is not None:
            raise SubmissionError(str(self.failure), transient=False)
        if not self._started:
            raise SubmissionError("the ray runtime is not started", transient=False)
        live = [a for a in self._actors if a.alive and not a.draining]
        live = [a for a in live if not self.nodes.is_suspect(a.node_id)] or live
        if not live:
            raise SubmissionError(
                "no ray actor is alive; replacements are starting", transient=True
            )
        actor = min(live, key=lambda a: len(a.sessions))
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

    async def _watch(self, actor: _Actor, sid: str, ref: Awaitable[object]) -> None:
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

    async def _replace(self, actor: _Actor) -> None:
        if not actor.alive or not self._started:
            return
        actor.alive = False
        self.nodes.suspect(actor.node_id)  # its node may be going: start nothing new there
        with contextlib.suppress(ValueError):
            self._actors.remove(actor)
        if actor.draining:  # it was leaving anyway
            return
        log.warning("ray actor %d on node %s died; starting a replacement", actor.index, actor.node)
        try:
            self._actors.append(await self._spawn())
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
            # an idle actor has no call to fail: its node's death is seen here instead
            for actor in [a for a in self._actors if a.alive and self.nodes.gone(a.node_id)]:
                self._track(self._replace(actor))
            for node in joined:
                await self._rebalance(node.node_id)
            self._retire_drained()

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
        counts = self._counts()
        if not self.options.spread or counts.get(node_id, 0) or max(counts.values(), default=0) < 2:
            return
        busiest = max(counts, key=lambda n: counts[n])
        moving = min(
            (a for a in self._actors if a.node_id == busiest and a.alive and not a.draining),
            key=lambda a: len(a.sessions),
        )
        try:
            new = await self._spawn(node_id)
        except Exception as exc:
            log.warning("no actor started on the node that joined: %s", exc)
            return
        self._actors.append(new)
        moving.draining = True
        self.actors_moved += 1
        log.info(
            "ray node %s joined: actor %d started there; actor %d on %s retires",
            new.node, new.index, moving.index, moving.node,
        )  # fmt: skip
        self._retire_drained()

    def _retire_drained(self) -> None:
        import ray

        for actor in [a for a in self._actors if a.draining and not a.sessions]:
            actor.alive = False
            self._actors.remove(actor)
            with contextlib.suppress(Exception):
                ray.kill(actor.handle)

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
        return {a.index: len(a.sessions) for a in self._actors if a.alive}

    async def close(self) -> None:
        """Kill the actors; shut Ray down if this runtime started it (bounded when the
        head is gone: Ray's shutdown then waits on it)."""
        if not self._started:
            return
        self._started = False
        import ray

        for task in list(self._watchers):
            task.cancel()
        for actor in self._actors:
            with contextlib.suppress(Exception):
                ray.kill(actor.handle)
        self._actors.clear()
        self._where.clear()
        if self._inited_ray:
            self._inited_ray = False
            await ray_nodes.shutdown_ray()
