"""What the ``ray`` runtime knows of its cluster: the nodes that may take rollout actors,
which of them are suspect, whether the head still answers, and how to leave it.

Ray's own view of a node lags its death by the head's health checks (about 15 s with
Ray's defaults): a node whose actors just died is marked *suspect* here at once, so new
rollouts and replacement actors go elsewhere meanwhile. A suspect node that Ray still
reports alive after :data:`SUSPECT_S` is trusted again.

The head is probed with a plain TCP connect to its GCS port: when the head is gone, Ray's
own calls (``ray.nodes()``) block instead of failing, so nothing here asks Ray before
the probe has answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = [
    "SUSPECT_S",
    "HeadProbe",
    "NodeTable",
    "RayNodeInfo",
    "gcs_address",
    "in_daemon_thread",
    "shutdown_ray",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: seconds a node stays suspect after its actors died while Ray still calls it alive
SUSPECT_S = 30.0
#: how long ``ray.shutdown`` may take when the head is gone (it is left behind after)
SHUTDOWN_WAIT_S = 10.0


@dataclass
class RayNodeInfo:
    """One node as the runtime sees it."""

    node_id: str
    name: str
    alive: bool
    resources: dict[str, float]


class NodeTable:
    """The cluster's nodes, refreshed from ``ray.nodes()``.

    :param required: custom resources an actor asks for (``[runtime] resources``): only
        nodes offering each of them take actors.
    """

    def __init__(self, required: Mapping[str, float]) -> None:
        self.required = dict(required)
        self.nodes: dict[str, RayNodeInfo] = {}
        self._suspect: dict[str, float] = {}

    def refresh(self) -> list[RayNodeInfo]:
        """Read the node table (blocking: call it in a thread); returns the nodes that
        became eligible (one that joined, came back, or is no longer suspect)."""
        import ray

        rows = ray.nodes()
        names = [str(r.get("NodeName") or r.get("NodeManagerAddress")) for r in rows if r["Alive"]]
        before = {n.node_id for n in self.eligible()}
        nodes = {}
        for row in rows:
            node_id = str(row["NodeID"])
            name = str(row.get("NodeName") or row.get("NodeManagerAddress") or node_id[:12])
            if names.count(name) > 1 or not row["Alive"]:  # unnamed nodes of one machine
                name = f"{name}/{node_id[:8]}"
            nodes[node_id] = RayNodeInfo(
                node_id, name, bool(row["Alive"]), dict(row.get("Resources") or {})
            )
        self.nodes = nodes
        now = time.monotonic()
        for node_id, since in list(self._suspect.items()):
            info = nodes.get(node_id)
            if info is None or not info.alive or now - since > SUSPECT_S:
                del self._suspect[node_id]
        return [n for n in self.eligible() if n.node_id not in before]

    def name(self, node_id: str | None) -> str:
        """A node's name (Ray's node name; ``?`` when unknown)."""
        if node_id is None:
            return "?"
        info = self.nodes.get(node_id)
        return info.name if info is not None else node_id[:12]

    def gone(self, node_id: str | None) -> bool:
        """Whether Ray's node table calls the node dead (or no longer lists it)."""
        if node_id is None or not self.nodes:
            return False
        info = self.nodes.get(node_id)
        return info is None or not info.alive

    def suspect(self, node_id: str | None) -> None:
        """An actor on this node died unexpectedly: send nothing new there for a while."""
        if node_id is not None and node_id not in self._suspect:
            self._suspect[node_id] = time.monotonic()
            log.warning("ray node %s is suspect: an actor on it died", self.name(node_id))

    def is_suspect(self, node_id: str | None) -> bool:
        """Whether the node lost an actor lately and Ray has not called it dead yet."""
        return node_id in self._suspect

    def eligible(self) -> list[RayNodeInfo]:
        """Live, not suspect nodes that offer every required resource."""
        return [
            n
            for n in self.nodes.values()
            if n.alive
            and n.node_id not in self._suspect
            and all(n.resources.get(k, 0.0) >= v for k, v in self.required.items())
        ]

    def pick(self, counts: Mapping[str, int]) -> RayNodeInfo | None:
        """The eligible node with the fewest rollout actors (``counts``: per node id)."""
        nodes = self.eligible()
        if not nodes:
            return None
        return min(nodes, key=lambda n: (counts.get(n.node_id, 0), n.name))


class HeadProbe:
    """Whether the cluster's head (its GCS) still takes connections.

    :param address: the GCS address, ``host:port``.
    :param timeout_s: how long the head may stay unreachable before :attr:`lost_for`
        passes it.
    """

    def __init__(self, address: str, timeout_s: float) -> None:
        host, _, port = address.rpartition(":")
        self.host, self.port = host or "127.0.0.1", int(port)
        self.timeout_s = timeout_s
        self._down_since: float | None = None

    @property
    def address(self) -> str:
        """``host:port`` of the GCS."""
        return f"{self.host}:{self.port}"

    async def check(self) -> bool:
        """One connect; False while the head does not answer."""
        try:
            async with asyncio.timeout(min(2.0, self.timeout_s)):
                _, writer = await asyncio.open_connection(self.host, self.port)
        except (OSError, TimeoutError):
            if self._down_since is None:
                self._down_since = time.monotonic()
                log.warning("the ray head at %s does not answer", self.address)
            return False
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        self._down_since = None
        return True

    async def watch(self, on_lost: Callable[[], None], interval_s: float) -> None:
        """Probe every ``interval_s``; call ``on_lost()`` once the head is lost, then stop."""
        while True:
            await asyncio.sleep(interval_s)
            if not await self.check() and self.lost:
                on_lost()
                return

    @property
    def lost_for(self) -> float:
        """Seconds the head has not answered (0 while it does)."""
        return 0.0 if self._down_since is None else time.monotonic() - self._down_since

    @property
    def lost(self) -> bool:
        """Whether the head has not answered for ``timeout_s`` seconds."""
        return self.lost_for >= self.timeout_s


def gcs_address() -> str:
    """The GCS address of the cluster this process joined."""
    import ray

    context: Any = ray.get_runtime_context()
    return str(context.gcs_address)


async def shutdown_ray(wait_s: float = SHUTDOWN_WAIT_S) -> None:
    """``ray.shutdown()``, waited for up to ``wait_s`` (with the head gone it takes
    seconds; after that it is left to finish in the background)."""
    import ray

    try:
        await in_daemon_thread(ray.shutdown, wait_s)
    except TimeoutError:
        log.warning("ray.shutdown() took over %gs; left running in the background", wait_s)


async def in_daemon_thread(fn: Callable[[], T], timeout_s: float) -> T:
    """``fn()`` in a daemon thread, waited for up to ``timeout_s``.

    Ray calls can block for as long as the head is unreachable; a thread of the loop's
    default executor would then hold up the program's exit, a daemon thread does not.

    :raises TimeoutError: ``fn`` did not return in time (it is left running).
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(outcome: tuple[T] | BaseException) -> None:
        if done.done():
            return
        if isinstance(outcome, BaseException):
            done.set_exception(outcome)
        else:
            done.set_result(outcome[0])

    def run() -> None:
        outcome: tuple[T] | BaseException
        try:
            outcome = (fn(),)
        except BaseException as err:  # handed to the awaiting task
            outcome = err
        with contextlib.suppress(RuntimeError):  # the loop may be closed by now
            loop.call_soon_threadsafe(settle, outcome)

    threading.Thread(target=run, name="ray-call", daemon=True).start()
    return await asyncio.wait_for(asyncio.shield(done), timeout_s)
