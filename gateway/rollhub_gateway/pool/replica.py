"""One gateway replica of a pool, as the pool sees it: a URL, its sessions, and its fate.

A replica is a whole gateway served somewhere else (a child process, a Ray actor). The pool
talks to it through the gateway's own admin routes with the pool's admin token. Subclasses
start and stop it and notice its death; once dead, every call naming one of its sessions
raises a :class:`~rollhub.errors.CaptureLost` that names the replica and the cause,
while the other replicas carry on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

from rollhub.errors import CaptureLost, GatewayError

from rollhub_gateway.admin_call import admin_call

if TYPE_CHECKING:
    import aiohttp

__all__ = ["POLICY_ROUTE", "Replica", "ReplicaDied", "ReplicaUnreachable"]

log = logging.getLogger(__name__)

#: the replica route that takes a pickled (policy, version) from the pool
POLICY_ROUTE = "/pool/policy"

#: how long a failed call waits for the death watcher to say why the replica went away
DEATH_GRACE_S = 2.0


class ReplicaDied(CaptureLost):
    """A call reached a dead replica, or one that came back without the session. Context:
    ``replica``, ``cause``, ``session_id``."""


class ReplicaUnreachable(CaptureLost):
    """A replica did not answer (its node may be going down) and is not known dead yet.
    Context: ``replica``, ``session_id``."""


class Replica(ABC):
    """A gateway served elsewhere; subclasses implement :meth:`start`, :meth:`stop` and
    :meth:`publish_policy`, and call :meth:`mark_dead` when it goes away."""

    #: "process" or "ray actor", used in messages
    kind: str = "replica"

    def __init__(self, index: int) -> None:
        self.index = index
        self.url: str | None = None
        #: its open sessions: id -> api key ("" until the replica has answered the open)
        self.live: dict[str, str] = {}
        self.opened = 0
        self.dead: str | None = None
        #: the weight version this replica was last told
        self.version: int | None = None
        self.version_known = False
        self._http: Any = None
        #: true while a replica that died is being started again (see ProcessReplica)
        self.restarting = False
        #: true while it finishes its sessions before moving to another node (Ray)
        self.draining = False
        #: times it was moved to another node (a restart that lost nothing)
        self.moves = 0
        #: times it started serving (a restart counts)
        self.starts = 0
        #: sessions a restart did not bring back: the death that lost them, in words
        self.lost: dict[str, str] = {}
        self._serving = asyncio.Event()
        self._restarter: asyncio.Task[Any] | None = None

    @property
    def name(self) -> str:
        """How messages name this replica (index plus where it runs)."""
        return f"gateway replica {self.index} ({self.kind} {self.where})"

    @property
    def where(self) -> str:
        """The pid, actor or node the replica runs as (subclasses fill it in)."""
        return "not started"

    @abstractmethod
    async def start(self, http: aiohttp.ClientSession) -> None:
        """Start the replica and set :attr:`url`; ``http`` is the pool's admin client."""

    @abstractmethod
    async def stop(self) -> None:
        """Stop the replica (idempotent; leaves nothing running)."""

    @abstractmethod
    async def publish_policy(self, policy: object, version: int) -> None:
        """Hand the replica's sampling backend a new policy as ``version``."""

    def mark_dead(self, cause: str) -> None:
        """Record that the replica is gone and why; its sessions fail from now on."""
        if self.dead is None:
            self.dead = cause
            log.error("%s died: %s; its %d live session(s) fail", self.name, cause, len(self.live))
        self.restarting = False
        self._serving.set()  # calls waiting for a restart learn it failed

    def mark_serving(self) -> None:
        """Record that the replica (re)started and serves at :attr:`url`."""
        self.starts += 1
        self.restarting = False
        self._serving.set()

    async def wait_serving(self) -> None:
        """Return once the replica serves, or is dead (a restart under way ends)."""
        await self._serving.wait()

    def mark_restarting(self) -> None:
        """Record that the replica died and is being started again by the current task:
        calls wait for it (except the restart's own)."""
        self.restarting = True
        self._restarter = asyncio.current_task()
        self._serving.clear()

    async def call(
        self,
        method: str,
        path: str,
        *,
        json: object = None,
        session_id: str | None = None,
        missing_ok: bool = False,
    ) -> Any:
        """One admin call; returns the JSON body (None for 204, or 404 with ``missing_ok``).

        :raises ReplicaDied: the replica is dead, or dies during the call.
        :raises TokenRetrievalError: the replica answered with an error status.
        """
        import aiohttp

        self._raise_if_dead(session_id)
        starts = self.starts
        try:
            return await admin_call(
                self._http,
                self.require_url(),
                method,
                path,
                who=self.name,
                json=json,
                missing_ok=missing_ok,
                replica=self.index,
                session_id=session_id,
            )
        except (TimeoutError, aiohttp.ClientError) as exc:
            # A refused or cut connection is usually the replica dying: give the watcher a
            # moment to learn the exit status, so the error says what happened; a replica
            # being restarted gets the call again once it serves.
            await self._await_fate(session_id)
            if self.dead is None and self.starts > starts:
                return await self.call(
                    method, path, json=json, session_id=session_id, missing_ok=missing_ok
                )
            self._raise_if_dead(session_id)
            raise ReplicaUnreachable(
                f"{self.name} unreachable for {method} {path}: {type(exc).__name__}: {exc}",
                replica=self.index,
                session_id=session_id,
            ) from exc

    async def _await_fate(self, session_id: str | None = None) -> None:
        """After a failed call: wait up to :data:`DEATH_GRACE_S` for the watcher to say the
        replica died or is restarting, and for a restart to finish (unless the call's
        session is lost whatever the restart brings: nothing to wait for then)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(DEATH_GRACE_S):
                while self.dead is None and not self.restarting:
                    await asyncio.sleep(0.05)
        if session_id is not None and session_id in self.lost:
            return
        if asyncio.current_task() is not self._restarter:
            await self._serving.wait()

    def _raise_if_dead(self, session_id: str | None) -> None:
        if session_id is not None and session_id in self.lost:
            raise ReplicaDied(
                f"{self.lost[session_id]}; session {session_id!r} is lost",
                replica=self.index,
                cause=self.lost[session_id],
                session_id=session_id,
            )
        if self.dead is None:
            return
        what = f"session {session_id!r} was on it and is lost" if session_id else "it is gone"
        raise ReplicaDied(
            f"{self.name} died ({self.dead}); {what}",
            replica=self.index,
            cause=self.dead,
            session_id=session_id,
        )

    def require_url(self) -> str:
        """The replica's root URL.

        :raises GatewayError: it has not started.
        """
        if self.url is None:
            raise GatewayError(f"{self.name} is not serving")
        return self.url
