"""agentcore-rl-toolkit's ``RolloutFuture`` and ``BatchItem``, with upstream's behaviour.

A future polls the result key with S3 ``HeadObject`` (per-future exponential backoff),
reads the document with ``GetObject`` and stops the runtime session once it has it, through
the boto3 clients it was given, so tests that hand it mocks keep working. Results of
rollhub-native agents (only ``_rollhub`` metadata) are shown with upstream's fields
(:func:`upstream_fields`); upstream documents are returned as stored.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Generator
from concurrent.futures import CancelledError
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from botocore.exceptions import ClientError

from rollhub.batch import BatchItem as RolloutRecord
from rollhub.rollout import RESULT_META_KEY
from rollhub.submission.ratelimit import RateLimiter

__all__ = ["BatchItem", "RolloutFuture", "upstream_fields"]

log = logging.getLogger(__name__)


class _WaitingLimiter(Protocol):
    """Upstream's rate limiter: it does the waiting."""

    def wait_sync(self) -> None: ...

    async def wait_async(self) -> None: ...


@runtime_checkable
class _AcquiresSync(Protocol):
    def acquire_sync(self) -> None: ...


@runtime_checkable
class _Acquires(Protocol):
    async def acquire(self) -> None: ...


#: what gates a future's stop calls: rollhub's token bucket or upstream's limiter
StopLimiter = RateLimiter | _WaitingLimiter


class _S3Reads(Protocol):
    """The S3 calls a future makes (a boto3 S3 client, or a test's mock)."""

    def head_object(self, **kwargs: object) -> object: ...

    def get_object(self, **kwargs: object) -> dict[str, Any]: ...


class _StopsSessions(Protocol):
    """The ``bedrock-agentcore`` call a future makes (boto3's client, or a mock)."""

    def stop_runtime_session(self, **kwargs: object) -> object: ...


@dataclass
class BatchItem:
    """One payload's end in a batch, as upstream shows it: a view of rollhub's record.

    The fields are upstream's (scripts build, compare and ``asdict`` these); a batch makes
    each item with :meth:`adapt` from the rollout's :class:`rollhub.batch.BatchItem`
    (index + :class:`~rollhub.submission.outcome.RolloutOutcome`), the one place that says
    how upstream's fields read a record.

    :ivar success: True when a result document was read (a failed agent too: upstream
        marks it with ``result["status_code"] == 500``); False when submission, the read or
        the timeout failed.
    :ivar result: the stored document (when ``success``).
    :ivar error: the exception with its traceback, or ``"Timeout after {timeout}s"``.
    :ivar index: the payload's position in the batch.
    :ivar elapsed: seconds from submission to this item.
    """

    success: bool
    result: dict[str, Any] | None = None
    error: str | None = None
    index: int | None = None
    elapsed: float | None = None

    @classmethod
    def adapt(cls, record: RolloutRecord) -> BatchItem:
        """Upstream's view of one rollout's record: the document read is the result, and
        the error is its traceback (or its message when it has none, as a timeout)."""
        outcome = record.outcome
        error = outcome.error
        return cls(
            success=outcome.document is not None,
            result=outcome.document,
            error=None if error is None else error.traceback or error.message,
            index=record.index,
            elapsed=outcome.elapsed,
        )


def upstream_fields(document: dict[str, Any]) -> dict[str, Any]:
    """A stored document as upstream's client returns it.

    Documents with ``status_code`` (upstream's app and rollhub's ``AgentCoreRLApp`` write
    it) are returned unchanged; a rollhub-native document gains ``status_code`` (200 or
    500), ``stop_reason`` and, for failures, ``traceback`` from its ``_rollhub`` metadata.
    """
    meta = document.get(RESULT_META_KEY)
    if "status_code" in document or not isinstance(meta, dict):
        return document
    out = dict(document)
    error = meta.get("error") or {}
    if meta.get("status") == "ok":
        out["status_code"], out["stop_reason"] = 200, "end_turn"
    else:
        out["status_code"] = 500
        out["stop_reason"] = error.get("message") or str(meta.get("status"))
        if error.get("traceback"):
            out["traceback"] = error["traceback"]
    return out


def _wait_sync(limiter: StopLimiter | None) -> None:
    if limiter is None:
        return
    if isinstance(limiter, _AcquiresSync):
        limiter.acquire_sync()
    else:
        limiter.wait_sync()


async def _wait_async(limiter: StopLimiter | None) -> None:
    if limiter is None:
        return
    if isinstance(limiter, _Acquires):
        await limiter.acquire()
    else:
        await limiter.wait_async()


def _is_missing(exc: ClientError) -> bool:
    return str(exc.response.get("Error", {}).get("Code")) in ("404", "NoSuchKey", "NotFound")


class RolloutFuture:
    """A rollout's pending result at ``s3://{s3_bucket}/{result_key}``.

    :param s3_client: boto3 S3 client used for ``head_object`` / ``get_object``.
    :param s3_bucket: the bucket the agent writes to.
    :param result_key: ``{exp_id}/{input_id}/{session_id}.json``.
    :param initial_interval: first poll interval, seconds.
    :param max_interval: cap on the poll interval.
    :param backoff_factor: the interval grows by this factor after each miss.
    :param session_id: the runtime session (stopped by :meth:`cancel`).
    :param input_id: the input's id.
    :param agentcore_client: boto3 ``bedrock-agentcore`` client for ``stop_runtime_session``.
    :param agent_runtime_arn: the runtime's ARN.
    :param rate_limiter: shared limiter for stop calls (rollhub's ``RateLimiter`` or any
        object with ``wait_sync``/``wait_async``).
    """

    def __init__(
        self,
        s3_client: _S3Reads,
        s3_bucket: str,
        result_key: str,
        initial_interval: float = 0.5,
        max_interval: float = 30.0,
        backoff_factor: float = 1.5,
        session_id: str | None = None,
        input_id: str | None = None,
        agentcore_client: _StopsSessions | None = None,
        agent_runtime_arn: str | None = None,
        rate_limiter: StopLimiter | None = None,
    ) -> None:
        self.s3_client = s3_client
        self.s3_bucket = s3_bucket
        self.result_key = result_key
        self.session_id = session_id
        self.input_id = input_id
        self.agentcore_client = agentcore_client
        self.agent_runtime_arn = agent_runtime_arn
        self._rate_limiter = rate_limiter
        self._result: dict[str, Any] | None = None
        self._done = False
        self._cancelled = False
        # Backoff state; BatchResult (and users, as with upstream) set these after creation.
        self._initial_interval = initial_interval
        self._poll_interval = initial_interval
        self._max_interval = max_interval
        self._backoff_factor = backoff_factor
        self._last_poll_time = 0.0
        self._start_time = time.time()

    # Polling -----------------------------------------------------------------------------

    def _missed(self) -> bool:
        self._last_poll_time = time.time()
        self._poll_interval = min(self._poll_interval * self._backoff_factor, self._max_interval)
        return False

    def done(self) -> bool:
        """Whether the result exists (one ``HeadObject``) or the future was cancelled.

        :raises botocore.exceptions.ClientError: any S3 error other than 404 (e.g. 403).
        """
        if self._done or self._cancelled:
            return True
        try:
            self.s3_client.head_object(Bucket=self.s3_bucket, Key=self.result_key)
        except ClientError as exc:
            if _is_missing(exc):
                return self._missed()
            raise
        self._done = True
        return True

    async def done_async(self) -> bool:
        """:meth:`done` with the S3 call in a thread."""
        if self._done or self._cancelled:
            return True
        try:
            await asyncio.to_thread(
                self.s3_client.head_object, Bucket=self.s3_bucket, Key=self.result_key
            )
        except ClientError as exc:
            if _is_missing(exc):
                return self._missed()
            raise
        self._done = True
        return True

    def time_until_next_poll(self) -> float:
        """Seconds until the next poll is due (``inf`` once the result exists)."""
        if self._done:
            return float("inf")
        return max(0.0, self._poll_interval - (time.time() - self._last_poll_time))

    def ready_to_poll(self) -> bool:
        """Whether the backoff interval since the last poll has passed."""
        return self.time_until_next_poll() <= 0

    def elapsed(self) -> float:
        """Seconds since this future was created."""
        return time.time() - self._start_time

    # Cancelling --------------------------------------------------------------------------

    @property
    def cancelled(self) -> bool:
        """True once cancelling was attempted (whether or not the stop call succeeded)."""
        return self._cancelled

    def _can_stop(self) -> bool:
        if self._cancelled:
            return False
        self._cancelled = True
        return bool(self.agentcore_client and self.session_id)

    def _stop(self) -> None:
        assert self.agentcore_client is not None  # _can_stop checked it
        self.agentcore_client.stop_runtime_session(
            agentRuntimeArn=self.agent_runtime_arn, runtimeSessionId=self.session_id
        )

    def cancel(self) -> bool:
        """Stop the runtime session; True only when ``StopRuntimeSession`` succeeded.

        Only the first call tries; failures are logged, not raised.
        """
        if not self._can_stop():
            return False
        try:
            _wait_sync(self._rate_limiter)
            self._stop()
        except Exception as exc:
            log.warning("stopping session %s failed: %s", self.session_id, exc)
            return False
        log.info("stopped session %s", self.session_id)
        return True

    async def cancel_async(self) -> bool:
        """:meth:`cancel` without blocking the event loop."""
        if not self._can_stop():
            return False
        try:
            await _wait_async(self._rate_limiter)
            await asyncio.to_thread(self._stop)
        except Exception as exc:
            log.warning("stopping session %s failed: %s", self.session_id, exc)
            return False
        log.info("stopped session %s", self.session_id)
        return True

    # Results -----------------------------------------------------------------------------

    def _fetch(self) -> dict[str, Any]:
        body = self.s3_client.get_object(Bucket=self.s3_bucket, Key=self.result_key)["Body"]
        return upstream_fields(json.loads(body.read()))

    def result(self, timeout: float | None = None) -> dict[str, Any]:
        """Wait for the stored document, then stop the session.

        :param timeout: seconds to wait (None or 0: no limit).
        :raises concurrent.futures.CancelledError: the future was cancelled first.
        :raises TimeoutError: no result in time (the session is stopped).
        :raises botocore.exceptions.ClientError: S3 refused a read (other than 404).
        """
        if self._result is not None:
            return self._result
        if self._cancelled:
            raise CancelledError("Future was cancelled")
        start = time.time()
        while not self.done():
            if timeout and time.time() - start > timeout:
                self.cancel()
                raise TimeoutError(f"Result not ready after {timeout}s")
            time.sleep(self._poll_interval)
        self._result = self._fetch()
        self.cancel()
        return self._result

    async def _poll(self) -> dict[str, Any]:
        if self._result is not None:
            return self._result
        if self._cancelled:
            raise CancelledError("Future was cancelled")
        while not await self.done_async():
            await asyncio.sleep(self._poll_interval)
        self._result = await asyncio.to_thread(self._fetch)
        await self.cancel_async()
        return self._result

    async def result_async(self, timeout: float | None = None) -> dict[str, Any]:
        """Async :meth:`result`; on timeout the session is stopped and
        :class:`TimeoutError` raised."""
        try:
            if timeout is None:
                return await self._poll()
            return await asyncio.wait_for(self._poll(), timeout=timeout)
        except TimeoutError:
            await self.cancel_async()
            raise

    def __await__(self) -> Generator[Any, None, dict[str, Any]]:
        return self._poll().__await__()
