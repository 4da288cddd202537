"""``local``: a pool of worker processes on this machine, each serving the user's RolloutApp.

The embedded default runtime. Each worker is ``python -m rollhub.runtimes.local_worker``
serving the app on its own 127.0.0.1 port and speaking the AgentCore Runtime contract
(``POST /invocations``, ``GET /ping``) plus rollhub's ``DELETE /rollouts/{id}`` and
``GET /rollouts``. Sessions go to the least-loaded worker. A worker that exits or stops
answering ``/ping`` (or answers it with an error, as an app whose handler threads are all
stuck does) is killed, its sessions are reported lost (the client runs them again on a new
session, and ends them ``infra_error`` when none is left, unless their result is already
stored) and a fresh worker replaces it.
A session whose result the app could not store is reported as a
:class:`~rollhub.runtime.StoreFailure`, which the client ends as ``store_error``.

Each runtime makes a random secret, hands it to its workers in ``ROLLHUB_APP_SECRET`` and
signs every request, so the workers' ports serve nobody else. Worker output (stdout and
stderr) is drained for the worker's whole life; see :mod:`rollhub.runtimes.local_output`.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import time
import weakref
from pathlib import Path
from typing import Any, ClassVar, cast

from rollhub.app.auth import new_secret
from rollhub.errors import ConfigError, RollhubError, SubmissionError
from rollhub.rollout import RolloutRequest, SubmitReceipt
from rollhub.runtime import Runtime, RuntimeOptions, StoreFailure
from rollhub.runtimes.local_http import (
    LoopbackConnectError,
    LoopbackHTTP,
    LoopbackHTTPError,
    refusal_error,
)
from rollhub.runtimes.local_launch import launch_worker
from rollhub.runtimes.local_options import LocalRuntimeOptions
from rollhub.runtimes.local_process import WorkerProcess

__all__ = ["LocalRuntime", "LocalRuntimeOptions"]

log = logging.getLogger(__name__)

SESSION_HEADER = "X-Amzn-Bedrock-AgentCore-Runtime-Session-Id"
#: consecutive failed pings after which a worker is killed and replaced
PING_FAILURES = 3

_LIVE: weakref.WeakSet[LocalRuntime] = weakref.WeakSet()


class LocalRuntime(Runtime):
    """Worker processes on this machine, started from the user's app reference.

    :param options: :class:`LocalRuntimeOptions`, or pass its fields as keywords.
    :param base_dir: directory a relative ``app`` path is resolved against (the config
        file's directory); default: the working directory.

    Example::

        async with LocalRuntime(app="examples/math/agent.py:app", workers=2) as runtime:
            receipt = await runtime.submit(request)
    """

    name: ClassVar[str] = "local"
    Options: ClassVar[type[RuntimeOptions]] = LocalRuntimeOptions
    loopback_callbacks = True

    def __init__(
        self,
        options: LocalRuntimeOptions | None = None,
        *,
        base_dir: str | os.PathLike[str] | None = None,
        **fields: object,
    ) -> None:
        if options is None:
            options = cast(LocalRuntimeOptions, self.options_from(fields))
        if not options.app:
            raise ConfigError(
                "the local runtime needs runtime.app: the RolloutApp to serve, e.g. "
                "app = 'examples/math/agent.py:app' or 'mypkg.agent:app'",
                field="runtime.app",
            )
        super().__init__(options)
        self.options: LocalRuntimeOptions = options
        self._base_dir = Path(base_dir) if base_dir is not None else None
        self._workers: list[WorkerProcess] = []
        self._where: dict[str, WorkerProcess] = {}
        self._http: LoopbackHTTP | None = None
        self._capacity: asyncio.Condition | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._notifies: set[asyncio.Task[Any]] = set()
        self._closing = False
        self._started = False
        self._next_index = 0
        self._secret = new_secret()
        self._replacing: set[asyncio.Task[Any]] = set()
        #: workers started so far, replacements included (for tests and logs)
        self.workers_started = 0

    # Lifecycle ----------------------------------------------------------------------------

    @property
    def app_ref(self) -> str:
        """The app reference with a relative file path made absolute."""
        assert self.options.app is not None
        target, sep, attr = self.options.app.partition(":")
        if target.endswith(".py") or "/" in target:
            path = Path(target).expanduser()
            if not path.is_absolute():
                path = (self._base_dir or Path.cwd()) / path
            target = str(path.resolve())
        return f"{target}{sep}{attr}"

    async def start(self) -> None:
        """Start the workers and wait until each answers ``/ping``."""
        if self._started:
            return
        self._started = True
        self._closing = False
        self._http = LoopbackHTTP(
            max_idle=self.options.max_concurrency_per_worker, secret=self._secret
        )
        self._capacity = asyncio.Condition()
        _LIVE.add(self)
        try:
            self._workers = list(
                await asyncio.gather(*(self._spawn() for _ in range(self.options.workers)))
            )
        except BaseException:
            await self.close()
            raise
        self._tasks.append(asyncio.get_running_loop().create_task(self._ping_loop()))

    async def close(self) -> None:
        """Stop every worker (SIGTERM, then SIGKILL), those still starting too, and the client."""
        if not self._started:
            return
        self._closing = True
        self._started = False
        for task in self._tasks:
            task.cancel()
        self._tasks.clear()
        # Replacements still starting: cancelling _spawn kills the process it started.
        replacing = list(self._replacing)
        for task in replacing:
            task.cancel()
        await asyncio.gather(*replacing, return_exceptions=True)
        workers, self._workers = self._workers, []
        await asyncio.gather(*(w.stop() for w in workers), return_exceptions=True)
        self._where.clear()
        if self._http is not None:
            await self._http.aclose()
            self._http = None
        _LIVE.discard(self)

    # Runtime interface -------------------------------------------------------------------

    async def submit(self, request: RolloutRequest) -> SubmitReceipt:
        """POST the request to the least-loaded live worker.

        A request that may have reached its worker (its answer timed out or was cut off)
        keeps the session on that worker: :meth:`cancel` then stops it there, and a retry
        goes to the same worker, which answers for the session it runs instead of
        starting a second copy.
        """
        if not self._started or self._http is None:
            raise SubmissionError("the local runtime is not started", transient=False)
        sid = request.rollout.session_id
        worker = self._where.get(sid)
        if worker is None or not worker.alive:
            self._forget(sid)
            worker = await self._pick()
            worker.sessions[sid] = None
            self._where[sid] = worker
        try:
            response = await self._http.request(
                "POST", worker.port, "/invocations",
                body=request.to_wire(), headers={SESSION_HEADER: sid},
            )  # fmt: skip
        except (LoopbackHTTPError, TimeoutError) as exc:
            if isinstance(exc, LoopbackConnectError):  # never sent: nothing runs there
                self._forget(sid)
            elif self._where.get(sid) is worker:
                # Maybe running there: stamped as accepted so that the liveness poll frees
                # the slot if the worker does not list it (the request never arrived).
                worker.sessions[sid] = time.monotonic()
            raise SubmissionError(
                f"worker {worker.index} did not take session {sid}: {type(exc).__name__}: {exc}",
                transient=True,
                session_id=sid,
            ) from exc
        if response.status_code != 200:
            self._forget(sid)
            raise refusal_error(response, sid)
        # The session may have ended and been freed while this answer was on its way (a
        # liveness poll saw its store failure, or a cancel came): taking the slot back then
        # would hold it for the worker's whole life.
        if self._where.get(sid) is worker:
            worker.sessions[sid] = time.monotonic()
        body = response.json()
        return SubmitReceipt(
            session_id=sid,
            result_location=str(body.get("result", "")),
            runtime=self.name,
            details={"worker": worker.index, "pid": worker.proc.pid},
        )

    async def cancel(self, session_id: str) -> None:
        """``DELETE /rollouts/{id}`` on the session's worker; unknown sessions are ignored."""
        worker = self._where.get(session_id)
        if worker is None or self._http is None or not worker.alive:
            self._forget(session_id)
            return
        try:
            await self._http.request("DELETE", worker.port, f"/rollouts/{session_id}", timeout=10.0)
        except (LoopbackHTTPError, TimeoutError) as exc:
            log.debug("cancel of %s on worker %d failed: %s", session_id, worker.index, exc)
        finally:
            self._forget(session_id)

    async def finish(self, session_id: str) -> None:
        """The result is stored, so the app has already ended the session: bookkeeping only."""
        self._forget(session_id)

    def load(self) -> dict[int, int]:
        """Sessions in flight per live worker (by worker index)."""
        return {w.index: len(w.sessions) for w in self._workers if w.alive}

    def worker_pids(self) -> list[int]:
        """Process ids of the live workers."""
        return [w.proc.pid for w in self._workers if w.alive]

    # Routing ------------------------------------------------------------------------------

    async def _pick(self) -> WorkerProcess:
        assert self._capacity is not None
        limit = self.options.max_concurrency_per_worker
        deadline = time.monotonic() + self.options.startup_timeout_s
        async with self._capacity:
            while True:
                live = [w for w in self._workers if w.alive and len(w.sessions) < limit]
                # A worker failing its liveness checks gets nothing new while others can.
                healthy = [w for w in live if not w.failures]
                live = healthy or live
                if live:
                    return min(live, key=lambda w: len(w.sessions))
                if not any(w.alive for w in self._workers) and time.monotonic() > deadline:
                    raise SubmissionError(
                        "no local worker is alive; see the worker log above", transient=True
                    )
                # Woken when a session ends or a worker comes up; the timeout re-checks.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._capacity.wait(), 1.0)

    def _forget(self, session_id: str) -> None:
        worker = self._where.pop(session_id, None)
        if worker is not None:
            worker.sessions.pop(session_id, None)
            self._wake()

    def _wake(self) -> None:
        cond = self._capacity
        if cond is None:
            return

        async def notify() -> None:
            async with cond:
                cond.notify_all()

        with contextlib.suppress(RuntimeError):
            task = asyncio.get_running_loop().create_task(notify())
            self._notifies.add(task)  # a reference, so the task is not collected mid-flight
            task.add_done_callback(self._notifies.discard)

    # Workers ------------------------------------------------------------------------------

    async def _spawn(self) -> WorkerProcess:
        index = self._next_index
        self._next_index += 1
        worker = await launch_worker(
            index, self.options, app_ref=self.app_ref, secret=self._secret,
            base_dir=self._base_dir, http=self._http,
        )  # fmt: skip
        self.workers_started += 1
        worker.tasks.append(asyncio.get_running_loop().create_task(self._watch(worker)))
        log.info("local worker %d up (pid %d, port %d)", index, worker.proc.pid, worker.port)
        self._wake()
        return worker

    async def _watch(self, worker: WorkerProcess) -> None:
        """Wait for the worker to exit; report its sessions lost and replace it."""
        code = await worker.proc.wait()
        worker.alive = False
        if self._http is not None:
            self._http.drop(worker.port)
        if self._closing:
            return
        lost = list(worker.sessions)
        log.warning(
            "local worker %d (pid %d) exited with code %s; %d sessions lost",
            worker.index, worker.proc.pid, code, len(lost),
        )  # fmt: skip
        for sid in lost:
            self._forget(sid)
            self._report_lost(
                sid, f"local worker {worker.index} (pid {worker.proc.pid}) exited with code {code}"
            )
        with contextlib.suppress(ValueError):
            self._workers.remove(worker)
        task = asyncio.current_task()
        if task is not None:
            self._replacing.add(task)
            task.add_done_callback(self._replacing.discard)
        delay = 0.0
        while not self._closing:
            try:
                await asyncio.sleep(delay)
                replacement = await self._spawn()
                if self._closing:  # closed while it started: it must not outlive the runtime
                    await replacement.stop()
                    return
                self._workers.append(replacement)
                return
            except RollhubError as exc:
                delay = min(10.0, max(0.5, delay * 2))
                log.error(
                    "replacing local worker %d failed: %s; retrying in %.1fs",
                    worker.index,
                    exc,
                    delay,
                )

    async def _ping_loop(self) -> None:
        interval = self.options.ping_interval_s
        while True:
            await asyncio.sleep(interval)
            await asyncio.gather(*(self._ping(w, interval) for w in list(self._workers) if w.alive))

    async def _ping(self, worker: WorkerProcess, timeout: float) -> None:
        """``GET /ping`` for liveness, then ``GET /rollouts`` to free slots of ended sessions."""
        assert self._http is not None
        asked_at = time.monotonic()
        try:
            r = await self._http.request("GET", worker.port, "/ping", timeout=max(timeout, 0.5))
            if r.status_code != 200:
                raise LoopbackHTTPError(f"GET /ping answered HTTP {r.status_code}")
        except (LoopbackHTTPError, TimeoutError) as exc:
            worker.failures += 1
            log.warning("local worker %d failed a liveness check (%d/%d): %s",
                        worker.index, worker.failures, PING_FAILURES, exc)  # fmt: skip
            if worker.failures >= PING_FAILURES and worker.alive:
                log.error(
                    "killing unresponsive local worker %d (pid %d)", worker.index, worker.proc.pid
                )
                with contextlib.suppress(ProcessLookupError):
                    worker.proc.kill()
            return
        worker.failures = 0
        if not worker.lists_rollouts or not any(worker.sessions.values()):
            return
        try:
            r = await self._http.request("GET", worker.port, "/rollouts", timeout=max(timeout, 0.5))
            listing = r.json() if r.status_code == 200 else None
            running = set(listing.get("running", [])) if listing is not None else None
            failed = dict(listing.get("store_failed") or {}) if listing is not None else {}
        except (LoopbackHTTPError, TimeoutError, ValueError, AttributeError, TypeError):
            return  # the next /ping decides whether the worker is alive
        if running is None:
            worker.lists_rollouts = False  # an app without rollhub's extension
            return
        # The app could not store these results: tell the client now (the completion
        # notice says so too, but clients without callbacks only hear it from here).
        for sid, cause in failed.items():
            if sid in worker.sessions and sid not in running:
                self._forget(sid)
                self._report_lost(sid, StoreFailure(str(cause)))
        # Sessions accepted before we asked and no longer running have ended on their own
        # (their result is stored); free their slots even if no client called finish().
        for sid, accepted in list(worker.sessions.items()):
            if accepted is not None and accepted < asked_at and sid not in running:
                self._forget(sid)


@atexit.register
def _kill_workers() -> None:
    # Last resort when a program exits without closing its runtime: no orphan workers.
    for runtime in list(_LIVE):
        for worker in runtime._workers:
            if worker.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    worker.proc.kill()
