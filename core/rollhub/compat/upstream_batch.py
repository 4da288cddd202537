"""agentcore-rl-toolkit's ``BatchResult`` and ``AsyncBatchResult``: batches with upstream's
observable behaviour (completion order, one :class:`BatchItem` per payload, fresh session
and input ids, per-item timeout, per-future backoff, every session stopped at the end)."""

from __future__ import annotations

import asyncio
import logging
import time
import traceback
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any, Protocol

from rollhub.batch import BatchItem as RolloutRecord
from rollhub.compat.upstream_futures import BatchItem, RolloutFuture
from rollhub.rollout import RESULT_META_KEY
from rollhub.submission.outcome import ErrorInfo, RolloutOutcome, Status

__all__ = ["AsyncBatchResult", "BatchResult", "Submitter", "format_exception"]

log = logging.getLogger(__name__)


def format_exception(exc: BaseException) -> str:
    """An exception with its traceback, as ``BatchItem.error`` carries it."""
    return "".join(traceback.format_exception(exc))


def _ended(
    index: int,
    future: RolloutFuture,
    status: Status,
    *,
    document: dict[str, Any] | None = None,
    error: ErrorInfo | None = None,
) -> BatchItem:
    """The item of a submitted payload: its record, as upstream shows it; its seconds are
    the future's (counted from when it was made)."""
    finished = time.time()
    outcome = RolloutOutcome(
        session_id=future.session_id or "",
        exp_id=future.result_key.split("/", 1)[0],
        input_id=future.input_id or "",
        result_key=future.result_key,
        status=status,
        result=None if document is None else {
            k: v for k, v in document.items() if k != RESULT_META_KEY},
        error=error,
        document=document,
        submitted_at=finished - future.elapsed(),
        finished_at=finished,
    )
    return BatchItem.adapt(RolloutRecord(index, outcome))


def _read(index: int, future: RolloutFuture, document: dict[str, Any]) -> BatchItem:
    """The item of a document read: upstream's failed agents store ``status_code`` 500."""
    status: Status = "agent_error" if document.get("status_code") == 500 else "ok"
    return _ended(index, future, status, document=document)


def _unread(index: int, future: RolloutFuture, exc: Exception) -> BatchItem:
    """The item of a document that could not be read."""
    return _ended(index, future, "store_error", error=ErrorInfo.from_exception(exc))


def _refused(index: int, elapsed: float, exc: Exception) -> BatchItem:
    """The item of a payload whose submission failed after ``elapsed`` seconds (no future
    was made)."""
    finished = time.time()
    outcome = RolloutOutcome(
        session_id="",
        exp_id="",
        input_id="",
        result_key="",
        status="submit_error",
        error=ErrorInfo.from_exception(exc),
        submitted_at=finished - elapsed,
        finished_at=finished,
    )
    return BatchItem.adapt(RolloutRecord(index, outcome))


class Submitter(Protocol):
    """What a batch needs of its client (``RolloutClient`` of this package)."""

    def _rate_limited_invoke(
        self, payload: dict[str, Any], session_id: str, input_id: str, **overrides: object
    ) -> RolloutFuture: ...

    async def _async_rate_limited_invoke(
        self, payload: dict[str, Any], session_id: str, input_id: str, **overrides: object
    ) -> RolloutFuture: ...


class _Batch:
    def __init__(
        self,
        client: Submitter,
        payloads: list[dict[str, Any]],
        max_concurrent: int,
        timeout: float = 900.0,
        initial_interval: float = 0.5,
        max_interval: float = 30.0,
        backoff_factor: float = 1.5,
        log_interval: float = 30.0,
    ) -> None:
        self.client = client
        self.payloads = list(payloads)
        self.max_concurrent = max_concurrent
        self.timeout = timeout
        self.initial_interval = initial_interval
        self.max_interval = max_interval
        self.backoff_factor = backoff_factor
        self.log_interval = log_interval
        self._last_log = time.time()

    def _tune(self, future: RolloutFuture) -> RolloutFuture:
        future._initial_interval = future._poll_interval = self.initial_interval
        future._max_interval = self.max_interval
        future._backoff_factor = self.backoff_factor
        return future

    def _timed_out(self, future: RolloutFuture) -> bool:
        return bool(self.timeout) and future.elapsed() > self.timeout

    def _timeout_item(self, index: int, future: RolloutFuture) -> BatchItem:
        error = ErrorInfo("TimeoutError", f"Timeout after {self.timeout}s")
        return _ended(index, future, "timeout", error=error)

    def _log_status(self, active: dict[str, tuple[int, RolloutFuture]], queued: int) -> None:
        if not active or time.time() - self._last_log < self.log_interval:
            return
        ages = [future.elapsed() for _, future in active.values()]
        log.info(
            "[Status] %d active, %d pending, elapsed: %.0fs-%.0fs",
            len(active),
            queued,
            min(ages),
            max(ages),
        )
        self._last_log = time.time()

    def _next_wait(self, active: dict[str, tuple[int, RolloutFuture]]) -> float:
        futures = [future for _, future in active.values()]
        wait = min(future.time_until_next_poll() for future in futures)
        if self.timeout:
            wait = min(wait, max(0.0, min(self.timeout - f.elapsed() for f in futures)))
        return wait


class BatchResult(_Batch):
    """Iterator of :class:`BatchItem` for ``client.run_batch(...)`` (completion order).

    :param client: the :class:`~rollhub.compat.upstream_client.RolloutClient` submitting.
    :param payloads: the payloads; each runs once under a fresh session and input id.
    :param max_concurrent: sessions running at once.
    :param timeout: seconds per item before it is stopped and reported as a timeout.
    :param initial_interval: first poll interval of every future.
    :param max_interval: cap on a future's poll interval.
    :param backoff_factor: growth of a future's poll interval per miss.
    :param log_interval: seconds between ``[Status]`` log lines.
    """

    def __iter__(self) -> Iterator[BatchItem]:
        queued = list(enumerate(self.payloads))
        active: dict[str, tuple[int, RolloutFuture]] = {}
        while queued or active:
            while queued and len(active) < self.max_concurrent:
                index, payload = queued.pop(0)
                try:
                    future = self.client._rate_limited_invoke(
                        payload, str(uuid.uuid4()), str(uuid.uuid4())
                    )
                except Exception as exc:
                    yield _refused(index, 0.0, exc)  # upstream counts no seconds for it
                    continue
                active[future.result_key] = (index, self._tune(future))
            finished = []
            for key, (index, future) in active.items():
                if self._timed_out(future):
                    finished.append(key)
                    future.cancel()
                    yield self._timeout_item(index, future)
                elif future.ready_to_poll() and future.done():
                    finished.append(key)
                    try:
                        yield _read(index, future, future.result())
                    except Exception as exc:
                        yield _unread(index, future, exc)
                    finally:
                        future.cancel()
            for key in finished:
                del active[key]
            self._log_status(active, len(queued))
            if active and not finished:
                wait = self._next_wait(active)
                if wait > 0:
                    time.sleep(wait)


class AsyncBatchResult(_Batch):
    """Async iterator of :class:`BatchItem` for ``client.run_batch_async(...)``.

    Same parameters as :class:`BatchResult`; submissions run as concurrent tasks, so one
    slow ``InvokeAgentRuntime`` (a cold start) does not hold up the others.
    """

    async def _run(self) -> AsyncIterator[BatchItem]:
        queued = list(enumerate(self.payloads))
        submitting: dict[asyncio.Task[RolloutFuture], tuple[int, float]] = {}
        active: dict[str, tuple[int, RolloutFuture]] = {}
        while queued or submitting or active:
            while queued and len(submitting) + len(active) < self.max_concurrent:
                index, payload = queued.pop(0)
                submit = self.client._async_rate_limited_invoke(
                    payload, str(uuid.uuid4()), str(uuid.uuid4())
                )
                submitting[asyncio.create_task(submit)] = (index, time.time())
            submitted = [task for task in submitting if task.done()]
            for task in submitted:
                index, started = submitting.pop(task)
                try:
                    future = task.result()
                except Exception as exc:
                    yield _refused(index, time.time() - started, exc)
                    continue
                active[future.result_key] = (index, self._tune(future))
            finished = []
            for key, (index, future) in active.items():
                if self._timed_out(future):
                    finished.append(key)
                    await future.cancel_async()
                    yield self._timeout_item(index, future)
                elif future.ready_to_poll() and await future.done_async():
                    finished.append(key)
                    try:
                        yield _read(index, future, await future.result_async())
                    except Exception as exc:
                        yield _unread(index, future, exc)
                    finally:
                        await future.cancel_async()
            for key in finished:
                del active[key]
            self._log_status(active, len(queued) + len(submitting))
            if (active or submitting) and not finished and not submitted:
                wait = self._next_wait(active) if active else 0.1
                if submitting:
                    wait = min(wait, 0.1)
                if wait > 0:
                    await asyncio.sleep(wait)

    def __aiter__(self) -> AsyncIterator[BatchItem]:
        return self._run().__aiter__()
