"""A Ray cluster of several nodes on this machine, for tests and the docs' walk-through.

Each node is its own ``ray start --block`` process, started exactly as on a real cluster
(``ray start --head`` on the head, ``ray start --address=HEAD`` on each worker), with its
own temporary and session directory, a small object store, a node name and a custom
resource named after the node (``rollhub_node_<name>``); worker nodes also offer
``rollhub_worker``, so work can be kept off the head or pinned to one node::

    with LocalRayCluster(tmp_path, workers=2) as cluster:
        os.environ["RAY_ADDRESS"] = cluster.address      # what rollhub's Ray parts join
        cluster.kill_node("worker-1")                     # SIGKILL its raylet: the node dies
        cluster.start_node("worker-1")                    # it comes back and rejoins

Only the processes it started are ever signalled (each node runs in its own process
group); ``stop()`` ends every node. Ray's own servers listen on every interface whatever
node address they are given (a Ray limitation); nothing else is exposed.

Node death is noticed by the head within ``health_check_s`` (Ray's GCS health checks,
``RAY_health_check_period_ms`` × ``RAY_health_check_failure_threshold``): a few seconds
here, where Ray's default is about 15 s.

``python -m rollhub.testing.ray_cluster DIR`` starts one in the foreground (Ctrl-C stops it).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollhub.testing.ports import free_ports
from rollhub.testing.process_tree import command_name, descendants

__all__ = ["HEAD", "LocalRayCluster", "RayClusterError", "RayNode"]

log = logging.getLogger(__name__)

#: the head node's name
HEAD = "head"
#: the custom resource every worker node offers (and the head does not)
WORKER_RESOURCE = "rollhub_worker"
#: the line ``ray start --block`` prints once its node is up
_READY = "This command will now block forever"
# what `ray start` prints when it exits over a port: a clash among its own ports, or one
# something else bound first
_PORT_TAKEN = ("is trying to use a port number", "already occupied", "Address already in use")
_PORT_RETRIES = 3
#: Ray's smallest object store (bytes)
MIN_OBJECT_STORE = 78_643_200


class RayClusterError(RuntimeError):
    """A node did not start; the message carries the tail of its log."""


@dataclass
class RayNode:
    """One node: its ``ray start --block`` process and where it keeps its files."""

    name: str
    proc: subprocess.Popen[bytes]
    temp_dir: Path
    log_path: Path
    resources: dict[str, float] = field(default_factory=dict)
    #: where this start's lines begin in the log (a node started again appends)
    log_offset: int = 0

    @property
    def resource(self) -> str:
        """The custom resource only this node offers (pin work to it with a tiny amount)."""
        return node_resource(self.name)

    @property
    def alive(self) -> bool:
        """Whether its ``ray start`` process still runs (it exits when its raylet dies)."""
        return self.proc.poll() is None

    def pids(self) -> list[int]:
        """Its ``ray start`` process and every process below it."""
        return [self.proc.pid, *descendants(self.proc.pid)]

    def raylet_pid(self) -> int:
        """The node's raylet.

        :raises RayClusterError: it is not running.
        """
        for pid in descendants(self.proc.pid):
            if command_name(pid) == "raylet":
                return pid
        raise RayClusterError(f"node {self.name} has no raylet running")


def node_resource(name: str) -> str:
    """The custom resource a node of this cluster named ``name`` offers."""
    return "rollhub_node_" + "".join(c if c.isalnum() else "_" for c in name)


class LocalRayCluster:
    """A head and ``workers`` worker nodes on 127.0.0.1, each a ``ray start`` process.

    :param root: a directory for the nodes' logs (``root/<name>.log``); their Ray
        temporary directories go under a short directory in ``/tmp``, removed by ``stop``.
    :param workers: worker nodes (named ``worker-1``, ``worker-2``, ...).
    :param cpus: CPUs each worker node offers (the head offers ``head_cpus``).
    :param head_cpus: CPUs of the head (0: no task or actor that needs a CPU runs there).
    :param object_store_bytes: object store of each node (Ray's minimum is 75 MiB).
    :param health_check_s: about how long the head takes to declare a dead node dead.
    :param start_timeout_s: how long one node may take to start.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        workers: int = 2,
        cpus: int = 2,
        head_cpus: int = 1,
        object_store_bytes: int = MIN_OBJECT_STORE,
        health_check_s: float = 3.0,
        start_timeout_s: float = 60.0,
    ) -> None:
        self.root = Path(root)
        self.worker_names = [f"worker-{i}" for i in range(1, workers + 1)]
        self.cpus = cpus
        self.head_cpus = head_cpus
        self.object_store_bytes = max(object_store_bytes, MIN_OBJECT_STORE)
        self.health_check_s = health_check_s
        self.start_timeout_s = start_timeout_s
        self.nodes: dict[str, RayNode] = {}
        self.port: int | None = None
        # Ray's socket paths under a node's temporary directory must fit in 107 bytes:
        # the nodes' directories live under a short one, removed by stop()
        self._short: Path | None = None

    # Lifecycle ------------------------------------------------------------------------------

    @property
    def address(self) -> str:
        """``host:port`` of the head's GCS (what ``ray.init(address=...)`` and
        ``RAY_ADDRESS`` take)."""
        if self.port is None:
            raise RayClusterError("the cluster is not started")
        return f"127.0.0.1:{self.port}"

    def start(self) -> LocalRayCluster:
        """Start the head, then the worker nodes (in parallel); wait until each is up."""
        self.root.mkdir(parents=True, exist_ok=True)
        if self._short is None:
            self._short = Path(tempfile.mkdtemp(prefix="rhray-"))
        try:
            self.start_node(HEAD)
            nodes = [self._spawn(name) for name in self.worker_names]
            for node in nodes:
                self._wait_up(node, respawns=_PORT_RETRIES)
        except BaseException:
            self.stop()
            raise
        return self

    def __enter__(self) -> LocalRayCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start_node(self, name: str) -> RayNode:
        """Start node ``name`` (the head, or a worker joining the head) and wait until it
        is up; a worker that was killed comes back under its old name and resources."""
        return self._wait_up(self._spawn(name), respawns=_PORT_RETRIES)

    def stop(self) -> None:
        """Stop every node it started: the workers together (they drain through the head),
        then the head; SIGKILL whatever is left of them."""
        head = self.nodes.get(HEAD)
        # with the head gone a worker would wait out its 30 s drain for nothing
        grace = 20.0 if head is not None and head.alive else 2.0
        workers = [n.name for n in self.nodes.values() if n.name != HEAD]
        self._stop_nodes(workers, grace)
        self._stop_nodes([HEAD] if head is not None else [], 20.0)
        self.nodes.clear()
        if self._short is not None:
            shutil.rmtree(self._short, ignore_errors=True)
            self._short = None

    def stop_node(self, name: str, grace_s: float = 20.0) -> None:
        """SIGTERM the node's ``ray start`` (it stops its processes), then SIGKILL its
        process group and anything of it still running."""
        self._stop_nodes([name], grace_s)

    def _stop_nodes(self, names: list[str], grace_s: float) -> None:
        nodes = [self.nodes[n] for n in names if n in self.nodes]
        left = {n.name: n.pids() for n in nodes}
        for node in nodes:
            if node.alive:
                node.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for node in nodes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.proc.wait(max(0.0, deadline - time.monotonic()))
        for node in nodes:
            _sigkill(node, [*left[node.name], *descendants(node.proc.pid)])
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.proc.wait(5)

    # Faults ---------------------------------------------------------------------------------

    def kill_node(self, name: str, *, at_once: bool = False) -> int:
        """SIGKILL node ``name``'s raylet: its ``ray start`` then ends the rest of the
        node, whose workers may finish what they were doing for up to a second or so. With
        ``at_once``, every process of the node is SIGKILLed together, as when a machine
        loses power: nothing on it answers again. Returns the raylet's pid."""
        node = self.nodes[name]
        pid = node.raylet_pid()
        if not at_once:
            os.kill(pid, signal.SIGKILL)
            return pid
        _sigkill(node, node.pids())
        return pid

    def wait_node_gone(self, name: str, timeout: float = 30.0) -> None:
        """Wait until every process of node ``name`` has exited.

        :raises RayClusterError: some still run after ``timeout`` seconds.
        """
        node = self.nodes[name]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not node.alive and not descendants(node.proc.pid):
                return
            time.sleep(0.1)
        raise RayClusterError(f"node {name} still runs {timeout:g}s after it was killed")

    # Internals ------------------------------------------------------------------------------

    def _spawn(self, name: str) -> RayNode:
        old = self.nodes.get(name)
        if old is not None and old.alive:
            raise RayClusterError(f"node {name} is running already")
        head = name == HEAD
        assert self._short is not None, "start() the cluster first"
        temp = self._short / name
        temp.mkdir(parents=True, exist_ok=True)
        resources = {node_resource(name): 1000.0}
        if not head:
            resources[WORKER_RESOURCE] = 1000.0
        flags = [
            "--node-manager-port", "--object-manager-port", "--dashboard-agent-listen-port",
            "--dashboard-agent-grpc-port", "--metrics-export-port", "--runtime-env-agent-port",
        ]  # fmt: skip
        *free, gcs = free_ports(len(flags) + 1)
        if head:
            self.port = gcs
        ports = dict(zip(flags, free, strict=True))
        args = [
            _ray_executable(), "start", "--block",
            *(["--head", f"--port={self.port}", "--include-dashboard=false"] if head
              else [f"--address={self.address}"]),
            "--node-ip-address=127.0.0.1",
            f"--node-name={name}",
            f"--num-cpus={self.head_cpus if head else self.cpus}",
            f"--resources={json.dumps(resources)}",
            f"--object-store-memory={self.object_store_bytes}",
            f"--temp-dir={temp}",
            "--disable-usage-stats",
            *(f"{flag}={port}" for flag, port in ports.items()),
        ]  # fmt: skip
        log_path = self.root / f"{name}.log"
        offset = log_path.stat().st_size if log_path.exists() else 0
        with log_path.open("ab") as out:
            proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self._env(),
                start_new_session=True,  # its own process group: killed as one, and alone
            )
        node = RayNode(name, proc, temp, log_path, resources, offset)
        self.nodes[name] = node
        return node

    def _env(self) -> dict[str, str]:
        period_ms = max(100, int(self.health_check_s * 1000 / 3))
        return {
            **os.environ,
            "RAY_AUTH_MODE": "disabled",  # no token file for a throwaway cluster
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_health_check_initial_delay_ms": "0",
            "RAY_health_check_period_ms": str(period_ms),
            "RAY_health_check_timeout_ms": str(period_ms),
            "RAY_health_check_failure_threshold": "3",
        }

    def _wait_up(self, node: RayNode, respawns: int = 0) -> RayNode:
        """Wait until ``node`` is up; a node that exits because one of its ports was
        taken (by anything on the machine, between the probe and Ray's bind) is started
        again on fresh ports, up to ``respawns`` times."""
        deadline = time.monotonic() + self.start_timeout_s
        offset = node.log_offset
        while time.monotonic() < deadline:
            text = _read_from(node.log_path, offset)
            if _READY in text:
                log.info("ray node %s up (pid %d)", node.name, node.proc.pid)
                return node
            if not node.alive:
                break
            time.sleep(0.1)
        exited, text = not node.alive, _read_from(node.log_path, offset)
        tail = "\n".join(text.splitlines()[-20:])
        self.stop_node(node.name)
        if respawns > 0 and exited and any(sign in text for sign in _PORT_TAKEN):
            log.warning("ray node %s lost one of its ports; starting it on fresh ones", node.name)
            return self._wait_up(self._spawn(node.name), respawns - 1)
        raise RayClusterError(
            f"ray node {node.name} did not start within {self.start_timeout_s:g}s; "
            f"its log ends with:\n{tail}"
        )

    def describe(self) -> dict[str, Any]:
        """Address, nodes, their resources and pids (for logs and the command line)."""
        return {
            "address": self.address,
            "nodes": {
                n.name: {"pid": n.proc.pid, "alive": n.alive, "resources": n.resources}
                for n in self.nodes.values()
            },
        }


def _sigkill(node: RayNode, pids: list[int]) -> None:
    """SIGKILL the node's process group, and ``pids`` (any that left the group)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(node.proc.pid, signal.SIGKILL)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _ray_executable() -> str:
    local = Path(sys.executable).with_name("ray")
    return str(local) if local.exists() else "ray"


def _read_from(path: Path, offset: int) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(offset)
            return fh.read().decode(errors="replace")
    except FileNotFoundError:
        return ""


def main(argv: list[str] | None = None) -> int:
    """Start a cluster under DIR and keep it up until Ctrl-C."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m rollhub.testing.ray_cluster")
    parser.add_argument("dir", help="where the nodes keep their files")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cpus", type=int, default=2, help="CPUs per worker node")
    args = parser.parse_args(argv)
    with LocalRayCluster(args.dir, workers=args.workers, cpus=args.cpus) as cluster:
        print(json.dumps(cluster.describe(), indent=2), flush=True)
        print(f"export RAY_ADDRESS={cluster.address}", flush=True)
        stop = {signal.SIGINT, signal.SIGTERM}
        signal.pthread_sigmask(signal.SIG_BLOCK, stop)
        signal.sigwait(stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
