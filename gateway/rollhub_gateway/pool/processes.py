"""Gateway replicas as child processes on this machine (``placement = "processes"``).

Each replica is ``python -m rollhub_gateway.pool.replica_server``: the pool writes its spec
(gateway config with the pool's admin token, journal path, engine factory) as one JSON line
on the child's stdin and keeps the pipe open; the child answers with one JSON line holding
its URL. A watcher task awaits the child's exit. An exit the pool did not ask for starts
the replica again on the same address and journal (``restarts`` times): agents keep their
base URL and key, journaled sessions carry on where their last answered call left them,
and sessions the new process does not hold fail with the cause. Past its restarts (or when
a restart fails) the replica is dead, with the signal or exit code and the last lines the
child wrote to stderr, and a :class:`~rollhub_gateway.pool.tombstone.Tombstone` takes over
its port so agents still calling it are told why.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import pickle
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from rollhub.errors import GatewayError, UsageError

from rollhub_gateway.pool.replica import POLICY_ROUTE, Replica
from rollhub_gateway.pool.tombstone import Tombstone

if TYPE_CHECKING:
    import aiohttp

__all__ = ["ProcessReplica"]

log = logging.getLogger(__name__)

#: stderr lines of a child kept for its death message
STDERR_TAIL = 20
#: how long a child gets to exit after SIGTERM before SIGKILL
STOP_GRACE_S = 10.0


class ProcessReplica(Replica):
    """A gateway replica served by a child process of this one.

    :param spec: what :class:`~rollhub_gateway.pool.replica_server.ReplicaServer` takes.
    :param start_timeout_s: how long the child may take to load and listen.
    """

    kind = "process"

    def __init__(
        self,
        index: int,
        spec: dict[str, Any],
        *,
        start_timeout_s: float,
        restarts: int = 0,
        on_restart: Callable[[ProcessReplica], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__(index)
        self.spec = spec
        self.start_timeout_s = start_timeout_s
        #: restarts left
        self.restarts = restarts
        #: awaited after a restart, before calls go on (the pool re-sends policy and version)
        self.on_restart = on_restart
        #: why each earlier process of this replica died
        self.deaths: list[str] = []
        self.proc: asyncio.subprocess.Process | None = None
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL)
        self._tasks: list[asyncio.Task[Any]] = []
        self._stopping = False
        #: what answers at this replica's address once it died
        self.tombstone: Tombstone | None = None

    @property
    def pid(self) -> int | None:
        """The child's process id once started."""
        return self.proc.pid if self.proc is not None else None

    @property
    def where(self) -> str:
        """``pid <n>``."""
        return f"pid {self.pid}" if self.pid is not None else "not started"

    async def start(self, http: aiohttp.ClientSession) -> None:
        """Spawn the child and wait for its URL.

        :raises GatewayError: the child exited or stayed silent past ``start_timeout_s``
            (with its stderr tail).
        """
        self._http = http
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "rollhub_gateway.pool.replica_server",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._tasks.append(asyncio.create_task(self._drain_stderr()))
        self.proc.stdin.write(json.dumps(self.spec).encode() + b"\n")
        await self.proc.stdin.drain()
        try:
            line = await asyncio.wait_for(self.proc.stdout.readline(), self.start_timeout_s)
        except TimeoutError:
            await self._stop_child()
            raise GatewayError(
                f"{self.name} did not listen within {self.start_timeout_s:g}s "
                f"(token_source.pool.start_timeout_s); stderr: {self._tail()}"
            ) from None
        if not line:
            rc = await self.proc.wait()
            await asyncio.sleep(0)  # let the stderr drain catch up
            raise GatewayError(
                f"{self.name} exited with {_describe_exit(rc)} before serving; "
                f"stderr: {self._tail()}",
                replica=self.index,
            )
        self.url = json.loads(line)["url"]
        # whatever a library prints later must not fill the pipe and stall the replica
        self._tasks.append(asyncio.create_task(self._drain_stdout()))
        self._tasks.append(asyncio.create_task(self._watch()))
        log.info("%s serving at %s", self.name, self.url)
        if not self.restarting:
            self.mark_serving()

    async def _drain_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        async for raw in self.proc.stderr:
            text = raw.decode(errors="replace").rstrip()
            if text:
                self.stderr_tail.append(text)
                log.debug("replica %d: %s", self.index, text)

    async def _drain_stdout(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        async for raw in self.proc.stdout:
            log.debug("replica %d stdout: %s", self.index, raw.decode(errors="replace").rstrip())

    async def _watch(self) -> None:
        assert self.proc is not None
        rc = await self.proc.wait()
        if self._stopping:
            return
        if self.restarts > 0:
            self.mark_restarting()
        await asyncio.sleep(0.05)  # the last stderr lines, when there are some
        cause = f"exited with {_describe_exit(rc)}; stderr: {self._tail()}"
        if self.restarts > 0:
            if await self._restart(cause):
                return
            cause = self.deaths[-1]
        self.mark_dead(cause)
        # agents still holding this replica's URL learn why, instead of "connection refused"
        tombstone = Tombstone(
            self.url or "", f"{self.name} died ({self.dead}); the sessions it served are lost"
        )
        if await tombstone.start():
            self.tombstone = tombstone

    async def _restart(self, cause: str) -> bool:
        """Start the replica again on its address; whether it serves again.

        Sessions the new process holds (journaled, not finished) carry on; the others are
        :attr:`lost`, with ``cause``.
        """
        self.restarts -= 1
        self.deaths.append(cause)
        old_name, url = self.name, self.url or ""
        log.warning("%s died (%s); starting it again at %s", self.name, cause, url)
        self.spec["config"]["port"] = int(url.rsplit(":", 1)[1])  # agents keep their URL
        current = asyncio.current_task()
        for task in self._tasks:  # the dead child's pipes
            if task is not current:
                task.cancel()
        self._tasks = [current] if current is not None else []  # stop() cancels a restart
        self.stderr_tail.clear()
        try:
            await self.start(self._http)
            if self.url != url:
                raise GatewayError(f"it came back at {self.url}, not {url}")
            held = await self.call("GET", "/sessions")
            kept = {s["session_id"] for s in held["open"]} | set(held["recoverable"])
            if self.on_restart is not None:  # before any agent's call: policy and version
                await self.on_restart(self)
        except Exception as exc:  # any failure leaves the replica dead
            log.error("%s could not be started again: %s", self.name, exc)
            self.deaths[-1] = f"{cause}; starting it again failed: {exc}"
            await self._stop_child()
            return False
        why = f"{old_name} died ({cause})"
        if not self.spec["config"].get("journal_path"):
            why += "; sessions survive a restart only with token_source.pool.journal_dir set"
        told = []  # the agents of lost sessions, still calling this address, learn why (410)
        for sid in self.live.keys() - kept:
            self.lost[sid] = why
            key = self.live.pop(sid)
            if key:
                told.append({"api_key": key, "reason": f"{why}; session {sid!r} is lost"})
        if told:
            with contextlib.suppress(Exception):
                await self.call("POST", "/sessions/lost", json={"sessions": told})
        self.mark_serving()
        log.warning(
            "%s serves again: %d session(s) carried on, %d lost",
            self.name,
            len(self.live),
            len(self.lost),
        )
        return True

    def _tail(self) -> str:
        return " | ".join(self.stderr_tail)[-2000:] or "(empty)"

    async def publish_policy(self, policy: object, version: int) -> None:
        """Send the pickled policy to the child's policy route.

        :raises UsageError: the policy cannot be pickled, or the child's backend refuses it.
        """
        try:
            body = pickle.dumps((policy, version))
        except Exception as exc:
            raise UsageError(
                f"a policy of type {type(policy).__name__} cannot be sent to gateway replica "
                f"processes ({exc}); use token_source.pool.placement = 'ray' (Ray's "
                f"serialisation) or an in-process gateway (drop token_source.pool)"
            ) from exc
        import aiohttp

        self._raise_if_dead(None)
        try:
            async with self._http.post(f"{self.url}{POLICY_ROUTE}", data=body) as resp:
                if resp.status >= 400:
                    data = await resp.json(content_type=None)
                    raise UsageError(f"{self.name} refused the policy: {data['error']['message']}")
        except aiohttp.ClientError as exc:
            raise GatewayError(f"{self.name} unreachable for the policy update: {exc}") from exc

    async def stop(self) -> None:
        """SIGTERM (and EOF on stdin), then SIGKILL after a grace period; reap the child."""
        self._stopping = True
        await self._stop_child()
        if self.tombstone is not None:
            await self.tombstone.stop()
            self.tombstone = None
        if self.dead is None:
            self.dead = "stopped by the pool"
            self._serving.set()

    async def _stop_child(self) -> None:
        # the tasks first: a watcher must not take the exit asked for here for a death,
        # and a restart under way must not start a child after this one is stopped
        current = asyncio.current_task()
        tasks = [t for t in self._tasks if t is not current]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = [t for t in self._tasks if t is current]
        proc = self.proc
        if proc is not None and proc.returncode is None:
            if proc.stdin is not None:
                proc.stdin.close()
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), STOP_GRACE_S)
            except TimeoutError:
                log.warning("%s ignored SIGTERM for %gs; killing it", self.name, STOP_GRACE_S)
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()


def _describe_exit(rc: int | None) -> str:
    if rc is None:
        return "an unknown status"
    if rc < 0:
        try:
            return f"signal {signal.Signals(-rc).name}"
        except ValueError:
            return f"signal {-rc}"
    return f"exit code {rc}"
