"""agentcore-rl-toolkit's ``RolloutClient`` signature, on rollhub's client.

Change the import, keep the calls::

    # from agentcore_rl_toolkit import RolloutClient
    from rollhub.compat.upstream_client import RolloutClient

    client = RolloutClient(arn, "my-bucket", "exp1", tps_limit=25, model_id="qwen",
                           temperature=0.7)
    for item in client.run_batch(payloads, max_concurrent_sessions=10):
        if item.success:
            print(item.result["rewards"])

Underneath: rollhub's ``agentcore`` runtime (boto3, the region from the ARN, endpoint from
``AWS_ENDPOINT_URL_BEDROCK_AGENTCORE`` as usual) and the ``s3://{s3_bucket}`` store read
through :class:`~rollhub.compat.upstream_layout.UpstreamLayoutStore`, so unmodified upstream
agents and rollhub agents both work. Results are what upstream returns: the stored dict,
with ``status_code`` (200, or 500 for an agent failure) and ``stop_reason``.

Where upstream's behaviour has no single rollhub meaning the facade raises
:class:`~rollhub.errors.UsageError` naming the rollhub way (polling internals such as
``ready_to_poll``), and client options never end up in ``_rollout``
(``invoke(max_concurrent_sessions=...)`` is a :class:`~rollhub.errors.ConfigError`).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from concurrent.futures import CancelledError
from dataclasses import dataclass
from typing import Any

from rollhub.client import RolloutClient as RollhubClient
from rollhub.client import RolloutFuture as RollhubFuture
from rollhub.client import RolloutOutcome
from rollhub.compat.agentcore_rl import SAMPLING_KEYS
from rollhub.compat.upstream_layout import UpstreamLayoutStore
from rollhub.errors import ConfigError, RolloutFailed, StoreError, SubmissionError, UsageError

__all__ = ["CLIENT_OPTIONS", "BatchItem", "RolloutClient", "RolloutFuture"]

log = logging.getLogger(__name__)

#: Options of upstream's client and batch runner → where they belong. Never ``_rollout``.
CLIENT_OPTIONS = {
    "max_concurrent_sessions": "run_batch(payloads, max_concurrent_sessions=N)",
    "timeout": "run_batch(..., timeout=S) or future.result(timeout=S)",
    "initial_interval": "run_batch(..., initial_interval=S)",
    "max_interval": "run_batch(..., max_interval=S)",
    "backoff_factor": "run_batch(..., backoff_factor=F)",
    "log_interval": "run_batch(..., log_interval=S)",
    "tps_limit": "RolloutClient(..., tps_limit=N)",
    "max_retry_attempts": "RolloutClient(..., max_retry_attempts=N)",
    "max_pool_connections": "RolloutClient(..., max_pool_connections=N)",
}
# Upstream's polling defaults; rollhub completes futures from the store on its own schedule.
_POLL_DEFAULTS = {"initial_interval": 0.5, "max_interval": 30.0, "backoff_factor": 1.5}


def refuse_client_options(fields: Mapping[str, Any], where: str) -> None:
    """Raise :class:`ConfigError` when a client option was passed as a ``_rollout`` field."""
    for name in sorted(set(fields) & set(CLIENT_OPTIONS)):
        raise ConfigError(
            f"{where}: {name}= is a client option, not a _rollout field; "
            f"pass it as {CLIENT_OPTIONS[name]}",
            field=name,
        )


def upstream_view(outcome: RolloutOutcome) -> dict[str, Any]:
    """The dict upstream's ``future.result()`` returns for a stored outcome."""
    doc = dict(outcome.document or {})
    if outcome.status == "ok":
        doc.setdefault("status_code", 200)
        doc.setdefault("stop_reason", "end_turn")
    else:
        error = outcome.error
        doc.setdefault("status_code", 500)
        doc.setdefault("stop_reason", error.message if error else outcome.status)
        if error is not None and error.traceback:
            doc.setdefault("traceback", error.traceback)
    return doc


@dataclass
class BatchItem:
    """Upstream's batch item: ``success`` means the rollout completed with a stored result
    (a failed agent too: its ``result["status_code"]`` is 500); ``error`` says why not.
    """

    success: bool
    result: dict[str, Any] | None = None
    error: str | None = None
    index: int | None = None
    elapsed: float | None = None


class RolloutFuture:
    """Upstream's future over a rollhub future: ``result()`` returns the stored dict."""

    def __init__(self, inner: RollhubFuture) -> None:
        self.inner = inner
        self.session_id = inner.session_id
        self.input_id = inner.input_id
        self.result_key = inner.result_key
        self._start = time.time()
        self._cancelled = False

    def done(self) -> bool:
        """Whether the rollout has ended (or was cancelled); no I/O."""
        return self._cancelled or self.inner.done()

    async def done_async(self) -> bool:
        """Same as :meth:`done` (rollhub learns of completion without being polled)."""
        return self.done()

    def elapsed(self) -> float:
        """Seconds since this future was created."""
        return time.time() - self._start

    def cancel(self) -> bool:
        """Cancel the rollout (its runtime session is stopped); True the first time."""
        if self._cancelled:
            return False
        self._cancelled = True
        return self.inner.cancel()

    async def cancel_async(self) -> bool:
        """Async :meth:`cancel`."""
        return await asyncio.to_thread(self.cancel)

    @property
    def cancelled(self) -> bool:
        """True once :meth:`cancel` was called."""
        return self._cancelled

    def result(self, timeout: float | None = None) -> dict[str, Any]:
        """The stored result dict; waits up to ``timeout`` seconds (None: no limit).

        :raises TimeoutError: no result in time (the rollout is cancelled, as upstream does).
        :raises concurrent.futures.CancelledError: the rollout was cancelled.
        :raises RolloutFailed: submission or the store failed (upstream raised these from
            ``invoke`` or the S3 read).
        """
        if self._cancelled and not self.inner.done():
            raise CancelledError("Future was cancelled")
        outcome = self.inner.result(timeout=timeout)
        return _dict_or_raise(outcome)

    async def result_async(self, timeout: float | None = None) -> dict[str, Any]:
        """Async :meth:`result`."""
        return await asyncio.to_thread(self.result, timeout)

    def ready_to_poll(self) -> bool:
        """Not available: rollhub schedules store reads itself."""
        raise UsageError(
            "ready_to_poll(): rollhub futures are completed by the client (callbacks and its own "
            "store reads); use future.done() or future.result(timeout=...)"
        )

    def time_until_next_poll(self) -> float:
        """Not available: rollhub schedules store reads itself."""
        raise UsageError(
            "time_until_next_poll(): rollhub schedules store reads itself; set "
            "poll_initial_s/poll_max_s on rollhub.client.RolloutClient if you must tune them"
        )

    def __await__(self) -> Any:
        return self.result_async().__await__()


def _dict_or_raise(outcome: RolloutOutcome) -> dict[str, Any]:
    status = outcome.status
    if status in ("ok", "agent_error") and outcome.document is not None:
        return upstream_view(outcome)
    message = outcome.error.message if outcome.error else status
    if status == "timeout":
        raise TimeoutError(f"Result not ready: {message}")
    if status == "cancelled":
        raise CancelledError(message)
    if status == "submit_error":
        raise SubmissionError(message, session_id=outcome.session_id)
    if status == "store_error":
        raise StoreError(message, key=outcome.result_key)
    raise RolloutFailed(f"{status}: {message}", session_id=outcome.session_id)


class RolloutClient:
    """agentcore-rl-toolkit's ``RolloutClient(agent_runtime_arn, s3_bucket, exp_id, ...)``.

    :param agent_runtime_arn: the AgentCore runtime ARN (region taken from it).
    :param s3_bucket: bucket the agents store results in.
    :param exp_id: experiment id (first part of every result key).
    :param max_retry_attempts: botocore retry attempts per call.
    :param tps_limit: InvokeAgentRuntime + StopRuntimeSession calls per second.
    :param max_pool_connections: HTTP connections to the service.
    :param base_url: model endpoint for the agents.
    :param model_id: model name for the agents.
    :param endpoint_url: the data plane's URL (default: boto3's usual resolution).
    :param extra_config: more ``_rollout`` fields; sampling ones (``temperature``, ``top_p``…)
        are sent flat, as upstream does, and under ``sampling`` for rollhub agents.
    :raises ConfigError: a client option among ``extra_config``, or a bad ARN or exp_id.
    """

    def __init__(
        self,
        agent_runtime_arn: str,
        s3_bucket: str,
        exp_id: str,
        max_retry_attempts: int = 5,
        tps_limit: int = 25,
        max_pool_connections: int = 10,
        base_url: str | None = None,
        model_id: str | None = None,
        *,
        endpoint_url: str | None = None,
        **extra_config: Any,
    ) -> None:
        refuse_client_options(extra_config, "RolloutClient()")
        from rollhub.runtimes.agentcore import AgentCoreRuntime
        from rollhub.stores import open_store

        runtime = AgentCoreRuntime(
            runtime_arn=agent_runtime_arn,
            tps=float(tps_limit),
            max_attempts=max_retry_attempts,
            max_pool_connections=max_pool_connections,
            endpoint_url=endpoint_url,
        )
        store = UpstreamLayoutStore(open_store(f"s3://{s3_bucket}"))
        defaults: dict[str, Any] = {"s3_bucket": s3_bucket, **_with_sampling(extra_config)}
        if base_url:
            defaults["base_url"] = base_url
        if model_id:
            defaults["model_id"] = model_id
        self.agent_runtime_arn = agent_runtime_arn
        self.s3_bucket = s3_bucket
        self.exp_id = exp_id
        self.client = RollhubClient(
            runtime, store, exp_id=exp_id, defaults=defaults, callbacks=False, close_runtime=True
        )
        self._started = False

    def _rollhub(self) -> RollhubClient:
        if not self._started:
            self.client.start()
            self._started = True
        return self.client

    def invoke(
        self,
        payload: dict[str, Any],
        session_id: str | None = None,
        input_id: str | None = None,
        **rollout_overrides: Any,
    ) -> RolloutFuture:
        """Start one rollout; per-call ``_rollout`` overrides win over client defaults."""
        refuse_client_options(rollout_overrides, "invoke()")
        fields = _with_sampling(rollout_overrides)
        fields["input_id"] = input_id or str(uuid.uuid4())
        if session_id:
            fields["session_id"] = session_id
        return RolloutFuture(self._rollhub().invoke(payload, **fields))

    async def invoke_async(
        self,
        payload: dict[str, Any],
        session_id: str | None = None,
        input_id: str | None = None,
        **rollout_overrides: Any,
    ) -> RolloutFuture:
        """Async :meth:`invoke`."""
        return await asyncio.to_thread(
            self.invoke, payload, session_id, input_id, **rollout_overrides
        )

    def run_batch(
        self,
        payloads: list[dict[str, Any]],
        max_concurrent_sessions: int,
        timeout: float = 900.0,
        initial_interval: float = 0.5,
        max_interval: float = 30.0,
        backoff_factor: float = 1.5,
        log_interval: float = 30.0,
    ) -> Iterator[BatchItem]:
        """Yield an upstream :class:`BatchItem` per payload as each ends (completion order).

        Every payload runs (no resume from earlier results) under a fresh input id, as
        upstream does. ``log_interval`` is accepted and unused (rollhub draws progress).

        :raises UsageError: polling intervals other than upstream's defaults (rollhub
            schedules store reads itself).
        """
        given = {
            "initial_interval": initial_interval,
            "max_interval": max_interval,
            "backoff_factor": backoff_factor,
        }
        for name, value in given.items():
            if value != _POLL_DEFAULTS[name]:
                raise UsageError(
                    f"run_batch({name}={value!r}): rollhub completes rollouts from callbacks "
                    f"and its own store reads; leave {name} out, or tune poll_initial_s / "
                    f"poll_max_s on rollhub.client.RolloutClient"
                )
        del log_interval
        items = list(payloads)
        stream = self._rollhub().run_batch(
            items,
            max_concurrent=max_concurrent_sessions,
            timeout=timeout,
            input_ids=[str(uuid.uuid4()) for _ in items],
            resume=False,
            progress=False,
        )
        for item in stream:
            outcome = item.outcome
            if outcome is None:  # only resumed items lack one, and resume is off
                error = None if item.ok else (item.error.message if item.error else item.status)
                yield BatchItem(item.ok, item.result, error, item.index, item.elapsed)
                continue
            try:
                result = _dict_or_raise(outcome)
            except (TimeoutError, CancelledError, RolloutFailed) as exc:
                error = str(exc) or type(exc).__name__
                yield BatchItem(False, error=error, index=item.index, elapsed=item.elapsed)
                continue
            yield BatchItem(result is not None, result, None, item.index, item.elapsed)

    async def run_batch_async(
        self, payloads: list[dict[str, Any]], max_concurrent_sessions: int, **options: Any
    ) -> AsyncIterator[BatchItem]:
        """Async :meth:`run_batch` (the batch runs on the client's own loop thread)."""
        stream = iter(self.run_batch(payloads, max_concurrent_sessions, **options))
        done = object()
        while True:
            item = await asyncio.to_thread(next, stream, done)
            if item is done:
                return
            yield item

    def close(self) -> None:
        """Stop the client (and its boto3 clients)."""
        if self._started:
            self.client.close()
            self._started = False


def _with_sampling(fields: Mapping[str, Any]) -> dict[str, Any]:
    """``fields`` with its sampling entries also under ``sampling`` (rollhub's place)."""
    out = dict(fields)
    sampling = {k: v for k, v in fields.items() if k in SAMPLING_KEYS}
    if sampling:
        out["sampling"] = {**(out.get("sampling") or {}), **sampling}
    return out
