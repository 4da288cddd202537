"""The client's engine: one task per rollout, from submission to exactly one terminal outcome.

A rollout waits for whichever signal comes first: a completion notice from the agent app
(see :mod:`rollhub.submission.callbacks`), the runtime reporting its session lost, or a store poll on
the :func:`poll_schedule`. Then the store is read once and the future resolved once.

Infrastructure faults are not the agent's: a session the runtime lost (its worker died,
its microVM went away) and a submission no worker took after every retry are tried again
under a new session, up to ``session_attempts`` sessions per rollout, within the rollout's
deadline. What the agent did (an exception, any reward), a timeout and a cancellation are
never retried. The future then carries the last session's id and result key; the dead
sessions and their causes are kept in :attr:`RolloutOutcome.dead_sessions`. A rollout
whose every session was lost that way ends ``infra_error``, never ``agent_error``.
A store that cannot be read is read again, on the poll schedule, until the deadline; one
still unreadable then ends the rollout ``store_error``, never ``agent_error``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from rollhub.episode import ErrorInfo, Status
from rollhub.errors import StoreError, UsageError
from rollhub.hubs.attempts import DEAD_SESSIONS, next_session
from rollhub.results.document import InvalidResultError, read_result
from rollhub.results.read import ResultTooLarge, read_stored
from rollhub.rollout import RolloutRequest, SubmitReceipt
from rollhub.runtime import Runtime, StoreFailure
from rollhub.stores.base import ResultStore
from rollhub.submission.future import RolloutFuture
from rollhub.submission.ratelimit import QueueTicket, queue_ticket
from rollhub.submission.retry import Backoff, is_transient, poll_schedule
from rollhub.submission.watch_support import (
    ERROR_STATUS,
    SESSION_BACKOFF,
    STOP_WAIT_S,
    Lost,
    NotTaken,
    Resolved,
    Signal,
    StoreFailed,
    best_effort,
)

__all__ = ["SessionWatch"]

log = logging.getLogger(__name__)


class SessionWatch:
    """Drives rollouts from submission to their terminal outcome (the client's engine).

    One task per rollout: submit (retrying transient errors), then wait for a signal (a
    callback notice, the runtime reporting the session lost, or a store poll), read the
    store, and resolve the future exactly once. Early ends (timeout, cancel) resolve the
    future at once and stop the runtime session in the background.
    """

    def __init__(
        self,
        *,
        runtime: Runtime,
        store: ResultStore,
        submit: Callable[[RolloutRequest], Awaitable[SubmitReceipt]],
        submit_attempts: int,
        submit_backoff: Backoff,
        callbacks: bool,
        poll_initial_s: float | None,
        poll_max_s: float | None,
        max_result_bytes: int | None = None,
        session_attempts: int = 1,
        on_new_session: Callable[[RolloutRequest, RolloutRequest], Awaitable[None]] | None = None,
    ) -> None:
        self._runtime = runtime
        self._store = store
        self._submit = submit
        self._attempts = submit_attempts
        self._submit_backoff = submit_backoff
        self._poll = poll_schedule(callbacks=callbacks, initial_s=poll_initial_s, max_s=poll_max_s)
        self._max_result_bytes = max_result_bytes
        self._session_attempts = session_attempts
        self._on_new_session = on_new_session
        self._loop: asyncio.AbstractEventLoop | None = None
        self._live: dict[str, RolloutFuture] = {}
        self._signals: dict[str, asyncio.Future[Signal]] = {}
        self._background: set[asyncio.Task[None]] = set()
        self.stats = {"submitted": 0, "store_reads": 0, "lost": 0, "retries": 0, "resubmitted": 0}

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Bind to the client's loop and listen for lost sessions."""
        self._loop = loop
        self._runtime.on_session_lost(self.lost)

    @property
    def live(self) -> int:
        """Rollouts not yet resolved."""
        return len(self._live)

    def launch(self, request: RolloutRequest, timeout: float | None) -> RolloutFuture:
        """Create the future of ``request`` and start driving it."""
        assert self._loop is not None
        sid = request.rollout.session_id
        running = self._live.get(sid)
        if running is not None and not running.done():
            raise UsageError(f"session_id {sid!r} is already running in this client; use a new id")
        if timeout is not None and request.rollout.deadline_at is None:
            # The app stores anything that ends later as a timeout, as this client reports it.
            request.rollout.deadline_at = time.time() + timeout
        fut = RolloutFuture(request, self._loop, self)
        # sessions it lost before (the hub runs it again after its capture session was lost)
        fut.dead_sessions.extend(dict(d) for d in request.extras.get(DEAD_SESSIONS, ()))
        self._live[sid] = fut
        # Registered before submission: a fast agent may call back before submit returns.
        self._signals[sid] = self._loop.create_future()
        fut._task = self._loop.create_task(self._drive(fut, timeout), name=f"rollout-{sid}")
        # A task cancelled before its first step never runs _drive's finally: clean up here too.
        fut._task.add_done_callback(lambda _task: self._forget(fut))
        return fut

    def _forget(self, fut: RolloutFuture) -> None:
        """Drop ``fut``'s bookkeeping (idempotent; a newer rollout of its id is kept)."""
        if not fut._submitted.done():
            fut._submitted.set_result(None)
        for key in {fut.session_id, *(d["session_id"] for d in fut.dead_sessions)}:
            if self._live.get(key) is fut:
                del self._live[key]
                self._signals.pop(key, None)

    # Signals ----------------------------------------------------------------------------

    def notice(self, notice: dict[str, Any]) -> None:
        """A completion notice from the app (unknown sessions are ignored)."""
        self._signal(str(notice.get("session_id")), ("notice", notice))

    def lost(self, session_id: str, reason: str) -> None:
        """The runtime says ``session_id`` can no longer finish."""
        if self._signal(session_id, ("lost", reason)):
            self.stats["lost"] += 1

    def _signal(self, session_id: str, value: Signal) -> bool:
        sig = self._signals.get(session_id)
        if sig is None or sig.done():
            return False
        sig.set_result(value)
        return True

    # Driving one rollout ------------------------------------------------------------------

    async def _drive(self, fut: RolloutFuture, timeout: float | None) -> None:
        try:
            async with asyncio.timeout(timeout):
                while True:
                    try:
                        await self._submit_with_retries(fut)
                        doc = await self._await_document(fut)
                        break
                    except (Lost, NotTaken) as exc:
                        if not await self._new_session(fut, str(exc)):
                            raise
            self._resolve_document(fut, doc)
        except TimeoutError:
            late = await self._at_deadline(fut)
            if late is not None:
                self._resolve_document(fut, late)
            elif fut._store_failure is not None:  # the result may be there: not a timeout
                message = "the result store was unreadable until the deadline: "
                fut.resolve(
                    "store_error", error=ErrorInfo("StoreError", message + fut._store_failure)
                )
            else:
                self.end_early(fut, "timeout", f"no result within {timeout} s", stop=False)
        except Resolved:
            pass
        except NotTaken as exc:  # no worker took any of its sessions
            fut.resolve("infra_error", error=ErrorInfo.from_exception(exc.exc))
        except Lost as exc:  # its last session died under it too
            fut.resolve("infra_error", error=ErrorInfo("SessionLost", str(exc)))
        except ResultTooLarge as exc:
            fut.resolve("agent_error", error=ErrorInfo("ResultTooLarge", str(exc)))
            self._in_background(self._runtime.finish(fut.session_id))
        except StoreFailed as exc:
            fut.resolve("store_error", error=ErrorInfo("StoreError", str(exc)))
            self._in_background(self._runtime.finish(fut.session_id))
        except asyncio.CancelledError:
            if not fut.done():  # the client is shutting down, not an early end of ours
                self.end_early(fut, "cancelled", "the rollout client closed")
                raise
        except Exception as exc:  # a bug must still resolve the future
            log.exception("rollout %s failed inside the client", fut.session_id)
            fut.resolve("agent_error", error=ErrorInfo.from_exception(exc))
        finally:
            self._forget(fut)

    async def _new_session(self, fut: RolloutFuture, cause: str) -> bool:
        """Move ``fut`` to a new session after an infrastructure fault; False: none left.

        A new session whose capture session cannot be opened (``on_new_session`` fails,
        say while no gateway replica can take one) is lost as well, and the next is tried.
        """
        while len(fut.dead_sessions) + 1 < self._session_attempts:
            old = fut.request
            old_sid = old.rollout.session_id
            fut.dead_sessions.append({"session_id": old_sid, "cause": cause})
            self.stats["resubmitted"] += 1
            # a session reported lost may still be running somewhere: it must not write later
            self._in_background(self._runtime.cancel(old_sid))
            k = len(fut.dead_sessions)
            new = next_session(old, fut.dead_sessions)
            log.info("session %s: %s; trying again as %s", old_sid, cause, new.rollout.session_id)
            await asyncio.sleep(SESSION_BACKOFF.delay(k - 1))
            self._live.pop(old_sid, None)
            self._signals.pop(old_sid, None)
            fut.request, fut.session_id = new, new.rollout.session_id
            fut.result_key, fut.receipt, fut.reached = new.rollout.result_key, None, False
            self._live[fut.session_id] = fut
            self._signals[fut.session_id] = asyncio.get_running_loop().create_future()
            if self._on_new_session is None:
                return True
            try:
                await self._on_new_session(old, new)
                return True
            except Exception as exc:
                cause = f"no capture session could be opened for it: {type(exc).__name__}: {exc}"
                log.warning("session %s: %s", fut.session_id, cause)
        return False

    async def _submit_with_retries(self, fut: RolloutFuture) -> None:
        """Submit ``fut``'s request, retrying transient errors.

        :raises NotTaken: every try failed transiently (an infrastructure fault).
        """
        if fut.submitted_at is None:
            fut.submitted_at = time.time()
            self.stats["submitted"] += 1
        for attempt in range(self._attempts):
            fut.attempts += 1
            # Tells a cancel whether this try is still queued in a rate limiter (never sent).
            ticket = fut._sending = QueueTicket()
            try:
                with queue_ticket(ticket):
                    fut.receipt = await self._submit(fut.request)
                if not fut._submitted.done():
                    fut._submitted.set_result(None)
                return
            except Exception as exc:
                transient = is_transient(exc)
                if transient and attempt + 1 < self._attempts:
                    self.stats["retries"] += 1
                    wait = self._submit_backoff.delay(attempt)
                    log.info("submit %s failed (%s); retry in %.2fs", fut.session_id, exc, wait)
                    await asyncio.sleep(wait)
                    # A loss reported for the failed attempt (its worker died, maybe during
                    # the wait) must not end the retried one.
                    sig = self._signals.get(fut.session_id)
                    if sig is not None and sig.done() and sig.result()[0] == "lost":
                        self._signals[fut.session_id] = asyncio.get_running_loop().create_future()
                    continue
                log.warning(
                    "submit %s failed after %d attempt(s): %s: %s",
                    fut.session_id,
                    attempt + 1,
                    type(exc).__name__,
                    exc,
                )
                if transient:  # it may have started despite the error: stop it
                    self._in_background(self._runtime.cancel(fut.session_id))
                    raise NotTaken(exc) from exc
                fut.resolve("submit_error", error=ErrorInfo.from_exception(exc))
                raise Resolved from exc
            finally:
                fut._sending = None
                fut.reached = fut.reached or not ticket.queued

    async def _await_document(self, fut: RolloutFuture) -> dict[str, Any]:
        sid, key = fut.session_id, fut.result_key
        failures = attempt = 0
        while True:
            sig = self._signals[sid]
            signal: Signal | None
            try:
                signal = await asyncio.wait_for(asyncio.shield(sig), self._poll.delay(attempt))
            except TimeoutError:
                signal = None
                attempt += 1
            doc = await self._read_once(fut, key)
            if doc is not None:
                return doc
            if signal is None:
                continue
            if signal[0] == "lost" and isinstance(signal[1], StoreFailure):
                raise StoreFailed(f"session {sid}: {signal[1]}")
            if signal[0] == "notice" and signal[1].get("status") == "store_error":
                err = signal[1].get("error")
                message = err.get("message") if isinstance(err, dict) else None
                raise StoreFailed(
                    f"session {sid}: {message or 'the app could not store the result'}"
                )
            if fut._store_failure is not None:
                # Whether the result is stored is unknown: keep the signal, read again later.
                await asyncio.sleep(self._poll.delay(failures))
                failures += 1
                continue
            if signal[0] == "lost":
                raise Lost(f"session {sid} was lost: {signal[1]}")
            # A notice without a readable document: keep polling, from the fast end.
            self._signals[sid] = asyncio.get_running_loop().create_future()
            attempt = 0

    async def _read_once(self, fut: RolloutFuture, key: str) -> dict[str, Any] | None:
        """Read ``key``; None when absent or unreadable (``fut._store_failure`` says why)."""
        try:
            doc = await self._read(key)
        except StoreError as exc:
            if fut._store_failure is None:
                log.warning("reading %s failed (%s); retrying until the deadline", key, exc)
            fut._store_failure = str(exc)
            return None
        fut._store_failure = None
        return doc

    async def _read(self, key: str) -> dict[str, Any] | None:
        self.stats["store_reads"] += 1
        return await read_stored(self._store, key, max_bytes=self._max_result_bytes)

    # Resolution ---------------------------------------------------------------------------

    def _resolve_document(self, fut: RolloutFuture, doc: dict[str, Any]) -> None:
        try:
            view = read_result(doc)
        except InvalidResultError as exc:
            fut.resolve(
                "agent_error", error=ErrorInfo("InvalidResultError", str(exc)), document=doc
            )
            return
        if view.status == "ok":
            fut.resolve("ok", result=view.result, document=doc)
        else:
            err = view.error or {}
            etype = str(err.get("type") or "UnknownError")
            status = ERROR_STATUS.get(etype, "agent_error")
            info = ErrorInfo(etype, str(err.get("message") or ""), err.get("traceback"))
            fut.resolve(status, result=view.result, error=info, document=doc)
        self._in_background(self._runtime.finish(fut.session_id))

    async def _at_deadline(self, fut: RolloutFuture) -> dict[str, Any] | None:
        """Stop the session, then read what the app stored: the store decides the outcome.

        The app stores exactly one document per session and answers the stop only once it
        is written: a result that finished in time (written just after the deadline) is
        ok, anything later a ``RolloutTimeout``. So the outcome always matches the store,
        and a later resume reports what this run reported.
        """
        if fut.may_have_reached:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._runtime.cancel(fut.session_id), STOP_WAIT_S)
        with contextlib.suppress(Exception):
            return await asyncio.wait_for(self._read_once(fut, fut.result_key), 1.0)
        return None

    def end_early(
        self, fut: RolloutFuture, status: Status, message: str, *, stop: bool = True
    ) -> None:
        """End a rollout before its result arrived (timeout, cancel); stop its session."""
        if fut.done():
            return
        etype = "RolloutTimeout" if status == "timeout" else "CancelledError"
        fut.resolve(status, error=ErrorInfo(etype, message))
        task = fut._task
        if task is not None and task is not asyncio.current_task() and not task.done():
            task.cancel()
        if stop and fut.may_have_reached:
            self._in_background(self._runtime.cancel(fut.session_id))

    def _in_background(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(best_effort(coro))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def settle(self, timeout: float = 10.0) -> None:
        """Wait for the session stops and releases started in the background."""
        if self._background:
            await asyncio.wait(list(self._background), timeout=timeout)

    async def shutdown(self, timeout: float = 10.0) -> None:
        """Cancel every live rollout and wait for session stops already under way."""
        for fut in list(self._live.values()):
            self.end_early(fut, "cancelled", "the rollout client closed")
        tasks = [f._task for f in self._live.values() if f._task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)
        if self._background:
            await asyncio.wait(list(self._background), timeout=timeout)
        self._runtime.remove_session_lost(self.lost)
