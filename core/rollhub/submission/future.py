"""What a submission returns: a :class:`RolloutFuture`, ending in one
:class:`~rollhub.submission.outcome.RolloutOutcome` (importable from here too)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Generator
from typing import Any, Protocol

from rollhub.lifetimes.loop_thread import ensure_no_running_loop
from rollhub.rollout import RolloutRequest, SubmitReceipt
from rollhub.submission.outcome import ErrorInfo, RolloutOutcome, Status
from rollhub.submission.ratelimit import QueueTicket

__all__ = ["FutureOwner", "RolloutFuture", "RolloutOutcome"]


class FutureOwner(Protocol):
    """What drives a :class:`RolloutFuture` (the client's session watch): the future calls
    back into it when a waiter's timeout or a cancel ends the rollout early."""

    def end_early(
        self, fut: RolloutFuture, status: Status, message: str, *, stop: bool = True
    ) -> None:
        """End ``fut`` as ``status`` before its result arrived and stop its session."""
        ...


class RolloutFuture:
    """The pending outcome of one rollout.

    Usable from the loop that owns it (``await future``, :meth:`result_async`) and from any
    other thread (:meth:`result`). Waiting with a ``timeout`` that expires ends the rollout
    as ``timeout`` and cancels its runtime session; use :meth:`done` to check without
    side effects.
    """

    def __init__(
        self, request: RolloutRequest, loop: asyncio.AbstractEventLoop, owner: FutureOwner
    ) -> None:
        self.request = request
        self.session_id = request.rollout.session_id
        self.input_id = request.rollout.input_id
        self.result_key = request.rollout.result_key
        self.receipt: SubmitReceipt | None = None
        self.attempts = 0
        #: a submission may have reached the runtime (so stopping the session is needed);
        #: unlike ``attempts``, tries still queued in a rate limiter do not count
        self.reached = False
        #: the submission in flight now (None between tries)
        self._sending: QueueTicket | None = None
        #: why the store could not be read, while the last read of the result failed
        self._store_failure: str | None = None
        #: runtime sessions this rollout lost to infrastructure faults: session_id, cause
        self.dead_sessions: list[dict[str, str]] = []
        self.submitted_at: float | None = None
        self._loop = loop
        self._owner = owner
        self._outcome: asyncio.Future[RolloutOutcome] = loop.create_future()
        self._submitted: asyncio.Future[None] = loop.create_future()
        self._task: asyncio.Task[None] | None = None

    @property
    def may_have_reached(self) -> bool:
        """Whether any submission of this session may have reached the runtime."""
        sending = self._sending
        return self.reached or (sending is not None and not sending.queued)

    def done(self) -> bool:
        """Whether the outcome is known."""
        return self._outcome.done()

    def result(self, timeout: float | None = None) -> RolloutOutcome:
        """Block until the outcome is known (from a thread without a running loop).

        :param timeout: seconds to wait; when they pass, the rollout ends as ``timeout``.
        :raises UsageError: called inside a running event loop (use ``await``).
        """
        if self.done():  # also after the client's loop has stopped
            return self._outcome.result()
        ensure_no_running_loop("RolloutFuture.result()")
        return asyncio.run_coroutine_threadsafe(self.result_async(timeout), self._loop).result()

    async def result_async(self, timeout: float | None = None) -> RolloutOutcome:
        """Await the outcome; with ``timeout``, end the rollout as ``timeout`` when it passes."""
        if self.done():
            return self._outcome.result()
        if asyncio.get_running_loop() is not self._loop:
            inner = asyncio.run_coroutine_threadsafe(self.result_async(timeout), self._loop)
            return await asyncio.wrap_future(inner)
        if timeout is None:
            return await asyncio.shield(self._outcome)
        try:
            return await asyncio.wait_for(asyncio.shield(self._outcome), timeout)
        except TimeoutError:
            self._owner.end_early(self, "timeout", f"no result within {timeout} s")
            return self._outcome.result()

    def __await__(self) -> Generator[Any, None, RolloutOutcome]:
        return self.result_async().__await__()

    def cancel(self) -> bool:
        """End the rollout as ``cancelled`` and stop its session; False if already done."""
        if self.done():
            return False
        if _on_loop(self._loop):
            self._owner.end_early(self, "cancelled", "cancelled by the client")
        else:
            self._loop.call_soon_threadsafe(
                self._owner.end_early, self, "cancelled", "cancelled by the client"
            )
        return True

    def resolve(
        self,
        status: Status,
        *,
        result: dict[str, Any] | None = None,
        error: ErrorInfo | None = None,
        document: dict[str, Any] | None = None,
    ) -> None:
        """Set the terminal outcome (only the first call counts), from this future's state:
        its last session, submission times, attempts and dead sessions."""
        if self.done():
            return
        receipt = self.receipt
        self._outcome.set_result(
            RolloutOutcome(
                session_id=self.session_id,
                exp_id=self.request.rollout.exp_id,
                input_id=self.input_id,
                result_key=self.result_key,
                status=status,
                result=result,
                error=error,
                document=document,
                submitted_at=self.submitted_at,
                accepted_at=receipt.submitted_at if receipt is not None else None,
                finished_at=time.time(),
                attempts=self.attempts,
                dead_sessions=tuple(self.dead_sessions),
                # where the last session ran (a worker, an actor and its node), as the
                # runtime said
                details=dict(receipt.details) if receipt is not None else {},
            )
        )

    async def wait_submitted(self) -> None:
        """Wait until the submission step ended (accepted, refused or abandoned)."""
        await asyncio.shield(self._submitted)

    def __repr__(self) -> str:
        state = self._outcome.result().status if self.done() else "pending"
        return f"<RolloutFuture {self.session_id} {state}>"


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False
