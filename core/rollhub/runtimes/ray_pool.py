"""The ``ray`` runtime's actors: where each one runs, what it holds, and starting one.

An actor starts on the eligible node with the fewest actors (Ray node affinity, when
``spread``) and counts once it has loaded the app. Each live actor also holds one call
that never returns, its *lifeline*, in its control group: the call fails as soon as the
actor's process dies, whatever killed it and whether or not a rollout was running there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rollhub.runtimes.ray_nodes import NodeTable
from rollhub.runtimes.ray_options import RayRuntimeOptions

__all__ = ["CONTROL", "CONTROL_SLOTS", "ActorPool", "PoolActor"]

log = logging.getLogger(__name__)

#: the actors' concurrency group for start, cancel and lifeline calls, and its size
CONTROL = "control"
CONTROL_SLOTS = 16


@dataclass
class PoolActor:
    """One rollout actor of the pool."""

    index: int
    handle: Any
    node_id: str | None = None
    node: str = "?"
    #: session id -> the ObjectRef of its ``wait`` call (None while it starts)
    sessions: dict[str, Any] = field(default_factory=dict)
    alive: bool = True
    #: takes no new session; killed once its rollouts end (its node gave one away)
    draining: bool = False


class ActorPool:
    """The rollout actors of one runtime.

    :param options: the runtime's options.
    :param nodes: the runtime's view of the cluster's nodes.
    """

    def __init__(self, options: RayRuntimeOptions, nodes: NodeTable) -> None:
        self.options = options
        self.nodes = nodes
        self.app_ref = ""
        self.actors: list[PoolActor] = []
        #: actors created so far, replacements included
        self.started = 0
        self._next = 0
        self._remote_cls: Any = None

    def bind(self, app_ref: str) -> None:
        """Wrap the actor class for Ray (imported here, once it is known to be installed);
        ``app_ref`` is the app each actor loads."""
        import ray

        from rollhub.runtimes.ray_actor import RolloutActor

        # Starts, cancels and lifelines run in their own group, so they are served even
        # when every rollout slot of the default group is waiting on a long rollout.
        # ray.remote accepts concurrency_groups, but its typed overloads leave the option out
        remote: Callable[..., Any] = ray.remote
        self._remote_cls = remote(concurrency_groups={CONTROL: CONTROL_SLOTS})(RolloutActor)
        self.app_ref = app_ref

    async def spawn(self, node_id: str | None = None, *, closing: Callable[[], bool]) -> PoolActor:
        """Start one actor (on ``node_id``, else the emptiest eligible node) and wait until
        it has loaded the app; a node that dies under it is avoided and another tried.

        :param closing: whether the runtime is closing (then a failed start is raised).
        """
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        while True:
            if node_id is None and self.options.spread:
                picked = self.nodes.pick(self.counts())
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
                if closing() or getattr(exc, "actor_init_failed", False):
                    raise
                log.warning(
                    "ray actor %d did not start on node %s (%s); trying another node",
                    index, self.nodes.name(node_id), type(exc).__name__,
                )  # fmt: skip
                self.nodes.suspect(node_id)
                node_id = None
                await asyncio.sleep(0.5)
                continue
            self.started += 1
            node = str(info["node_id"])
            actor = PoolActor(index, handle, node_id=node, node=self.nodes.name(node))
            self.actors.append(actor)
            return actor

    @staticmethod
    async def lifeline(actor: PoolActor) -> None:
        """Return (or raise Ray's error) once the actor's process is gone."""
        await actor.handle.lifeline.options(concurrency_group=CONTROL).remote()

    def counts(self) -> dict[str, int]:
        """Live actors taking sessions, per node id."""
        counts: dict[str, int] = {}
        for a in self.actors:
            if a.alive and not a.draining and a.node_id is not None:
                counts[a.node_id] = counts.get(a.node_id, 0) + 1
        return counts

    def placement(self) -> dict[str, int]:
        """Live actors per node name (draining ones left out)."""
        return {self.nodes.name(k): v for k, v in sorted(self.counts().items())}

    def least_loaded(self) -> PoolActor | None:
        """The live actor with the fewest sessions, off suspect nodes when one is left."""
        live = [a for a in self.actors if a.alive and not a.draining]
        live = [a for a in live if not self.nodes.is_suspect(a.node_id)] or live
        return min(live, key=lambda a: len(a.sessions)) if live else None

    def remove(self, actor: PoolActor) -> None:
        """Take a dead (or retiring) actor out of the pool."""
        actor.alive = False
        with contextlib.suppress(ValueError):
            self.actors.remove(actor)

    def retire_drained(self) -> None:
        """Kill the draining actors whose rollouts have all ended."""
        for actor in [a for a in self.actors if a.draining and not a.sessions]:
            self.remove(actor)
            self.kill(actor)

    def kill_all(self) -> None:
        """Kill every actor and forget them."""
        for actor in self.actors:
            actor.alive = False
            self.kill(actor)
        self.actors.clear()

    @staticmethod
    def kill(actor: PoolActor) -> None:
        """``ray.kill`` the actor; one already gone is no error."""
        import ray

        with contextlib.suppress(Exception):
            ray.kill(actor.handle)
