"""The rollout client: submit rollouts, get futures, await terminal outcomes.

Rollouts run for minutes or hours, so submission is fire-and-forget and completion is
awaited::

    async with AsyncRolloutClient(runtime, "file://runs/results", exp_id="exp1") as client:
        future = client.invoke({"question": "2+2?"}, model_id="qwen")
        outcome = await future           # RolloutOutcome: status, result, error, timings

Each future ends in exactly one terminal status (``ok``, ``agent_error``, ``timeout``,
``submit_error``, ``cancelled``, ``store_error``, ``infra_error``). Completion comes from the app's callback
notice (the client runs a loopback :class:`~rollhub.submission.callbacks.CallbackServer` when the
runtime's agents can reach it), from the runtime reporting the session lost or its result
unstorable, or from a sparse store poll.
:class:`RolloutClient` is the synchronous twin: same methods, same order, driving the async
client on a private event-loop thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from rollhub.batch import BatchItem, run_batch_async
from rollhub.errors import ConfigError, UsageError
from rollhub.lifetimes.loop_thread import LoopThread, ensure_no_running_loop
from rollhub.rollout import RolloutRequest, SubmitReceipt, build_request, validate_key_part
from rollhub.submission.callbacks import CallbackServer
from rollhub.submission.future import RolloutFuture, RolloutOutcome
from rollhub.submission.retry import Backoff
from rollhub.submission.session_watch import SessionWatch

if TYPE_CHECKING:
    from rollhub.runtime import Runtime
    from rollhub.stores.base import ResultStore

__all__ = ["AsyncRolloutClient", "RolloutClient", "RolloutFuture", "RolloutOutcome"]

log = logging.getLogger(__name__)

SubmitFn = Callable[[RolloutRequest], Awaitable[SubmitReceipt]]


class AsyncRolloutClient:
    """Submits rollouts to a runtime and resolves their futures from the result store.

    :param runtime: a :class:`~rollhub.runtime.Runtime` (started by :meth:`start`).
    :param store: a :class:`~rollhub.stores.base.ResultStore` or its URL.
    :param exp_id: experiment id (first part of every result key).
    :param defaults: ``_rollout`` fields for every rollout (``base_url``, ``model_id``…).
    :param submit: replaces ``runtime.submit`` (the pipeline routes it through the
        ``rollhub_submit_rollout`` hook).
    :param timeout_s: default deadline of one rollout, submission included (None: none).
    :param callbacks: ``"auto"`` (a loopback callback server when the runtime's agents can
        reach it), True (always; set ``callback_host`` if agents run elsewhere) or False.
    :param callback_host: address to bind the callback server and to advertise.
    :param submit_attempts: tries per submission for transient errors (throttling, 5xx,
        connection refused); permanent errors are not retried.
    :param submit_backoff: delays between those tries (and before a new session).
    :param session_attempts: runtime sessions per rollout when the infrastructure fails
        under it (its worker died or was unreachable, the runtime lost the session): the
        rollout is submitted again under a new session id, within its deadline. An agent's
        exception, any reward, a timeout and a cancellation are never retried. 1: never.
    :param on_new_session: ``await on_new_session(old_request, new_request)`` before such a
        resubmission (the hub opens a fresh token-capture session there).
    :param poll_initial_s: first store poll (default 2 s with callbacks, 50 ms without).
    :param poll_max_s: longest gap between store polls.
    :param close_runtime: also close the runtime in :meth:`close`.
    :param progress: default of ``run_batch_async(progress=...)``.
    :param max_result_bytes: a ``file://`` result larger than this ends its rollout as
        ``agent_error`` (``ResultTooLarge``) without being parsed: parsing holds the
        interpreter lock however it is run, so a huge result would stall every other
        rollout of this client. None: no limit.
    """

    def __init__(
        self,
        runtime: Runtime,
        store: ResultStore | str,
        *,
        exp_id: str,
        defaults: Mapping[str, Any] | None = None,
        submit: SubmitFn | None = None,
        timeout_s: float | None = None,
        callbacks: bool | str = "auto",
        callback_host: str = "127.0.0.1",
        submit_attempts: int = 5,
        submit_backoff: Backoff | None = None,
        session_attempts: int = 2,
        on_new_session: Callable[[RolloutRequest, RolloutRequest], Awaitable[None]] | None = None,
        poll_initial_s: float | None = None,
        poll_max_s: float | None = None,
        close_runtime: bool = False,
        progress: bool | None = None,
        max_result_bytes: int | None = 64 * 1024 * 1024,
    ) -> None:
        if isinstance(store, str):
            from rollhub.stores import open_store

            store = open_store(store)
        try:
            validate_key_part(exp_id, "exp_id")
        except ValueError as exc:
            raise ConfigError(str(exc), field="exp_id") from exc
        if callbacks not in (True, False, "auto"):
            raise ConfigError(f"callbacks={callbacks!r}: use True, False or 'auto'")
        if max_result_bytes is not None and max_result_bytes < 1:
            raise ConfigError(
                f"max_result_bytes={max_result_bytes!r} must be >= 1 (or None for no limit)",
                field="max_result_bytes",
            )
        if submit_attempts < 1:
            raise ConfigError(f"submit_attempts={submit_attempts!r} must be >= 1")
        if session_attempts < 1:
            raise ConfigError(
                f"session_attempts={session_attempts!r} must be >= 1 (1: never resubmit)",
                field="session_attempts",
            )
        self.runtime = runtime
        self.store = store
        self.exp_id = exp_id
        self.defaults = dict(defaults or {})
        self.timeout_s = timeout_s
        self.progress = progress
        self._submit_fn: SubmitFn = submit or runtime.submit
        self._use_callbacks = (
            bool(runtime.loopback_callbacks) if callbacks == "auto" else bool(callbacks)
        )
        self._callback_host = callback_host
        self._close_runtime = close_runtime
        self._watch = SessionWatch(
            runtime=runtime,
            store=store,
            submit=self._submit_fn,
            submit_attempts=submit_attempts,
            submit_backoff=submit_backoff or Backoff(initial=0.2, factor=2.0, maximum=10.0),
            callbacks=self._use_callbacks,
            poll_initial_s=poll_initial_s,
            poll_max_s=poll_max_s,
            max_result_bytes=max_result_bytes,
            session_attempts=session_attempts,
            on_new_session=on_new_session,
        )
        self._server: CallbackServer | None = None
        self._started = False
        self._closed = False

    @property
    def callback_url(self) -> str | None:
        """Where agents post completion notices (None when callbacks are off)."""
        return self._server.url if self._server is not None else None

    @property
    def stats(self) -> dict[str, int]:
        """Counters: submitted, store reads, callbacks received, sessions lost, submission
        retries, rollouts resubmitted under a new session."""
        stats = dict(self._watch.stats)
        stats["callbacks"] = self._server.received if self._server else 0
        return stats

    async def start(self) -> AsyncRolloutClient:
        """Start the runtime (idempotent) and the callback server."""
        if self._closed:
            raise UsageError("this AsyncRolloutClient is closed; create a new one")
        if self._started:
            return self
        await self.runtime.start()
        if self._use_callbacks:
            self._server = CallbackServer(self._watch.notice, host=self._callback_host)
            await self._server.start()
        self._watch.attach(asyncio.get_running_loop())
        self._started = True
        return self

    def invoke(
        self, payload: Mapping[str, Any], *, timeout: float | None = None, **rollout: object
    ) -> RolloutFuture:
        """Start one rollout in the background and return its future at once.

        :param payload: the agent's input (a JSON object).
        :param timeout: deadline in seconds for this rollout (default: ``timeout_s``).
        :param rollout: ``_rollout`` overrides (``input_id``, ``model_id``, ``sampling``…).
        :raises ConfigError: a bad ``_rollout`` field (before anything is submitted).
        """
        return self.submit_request(self.request(payload, **rollout), timeout=timeout)

    async def invoke_async(
        self, payload: Mapping[str, Any], *, timeout: float | None = None, **rollout: object
    ) -> RolloutFuture:
        """Like :meth:`invoke`, but return once the runtime accepted (or refused) the rollout."""
        return await self.submit_request_async(self.request(payload, **rollout), timeout=timeout)

    def submit_request(
        self, request: RolloutRequest, *, timeout: float | None = None
    ) -> RolloutFuture:
        """Start a prepared request in the background and return its future at once.

        A request without ``callback_url`` gets this client's (when callbacks are on), so
        requests built elsewhere (the pipeline) complete without poll latency too.

        :raises UsageError: the request names another result store than this client reads.
        """
        self._require_started()
        rollout = request.rollout
        if rollout.result_store != self.store.url:
            raise UsageError(
                f"request {rollout.session_id} stores its result in {rollout.result_store!r} but "
                f"this client reads {self.store.url!r}; build it with result_store=client.store.url"
            )
        if rollout.callback_url is None and self._server is not None:
            rollout.callback_url = self._server.url
        return self._watch.launch(request, timeout if timeout is not None else self.timeout_s)

    async def submit_request_async(
        self, request: RolloutRequest, *, timeout: float | None = None
    ) -> RolloutFuture:
        """Like :meth:`submit_request`, but return once the submission step has ended."""
        future = self.submit_request(request, timeout=timeout)
        await future.wait_submitted()
        return future

    def run_batch_async(
        self, payloads: Iterable[Mapping[str, Any]], **options: Any
    ) -> AsyncIterator[BatchItem]:
        """Run many rollouts; yield a :class:`~rollhub.batch.BatchItem` per payload as each ends.

        See :func:`rollhub.batch.run_batch_async` for the options.
        """
        options.setdefault("progress", self.progress)
        return run_batch_async(self, payloads, **options)

    async def settle(self) -> None:
        """Wait until cancelled rollouts have ended (their runtime sessions stopped) and
        finished ones have handed their runtime slots back."""
        await self._watch.settle()

    async def close(self) -> None:
        """Cancel rollouts still running, stop the callback server (and the runtime if owned)."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._started:
                await self._watch.shutdown()
        finally:
            if self._server is not None:
                await self._server.close()
            if self._close_runtime:
                await self.runtime.close()

    async def __aenter__(self) -> AsyncRolloutClient:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # Pure helpers ---------------------------------------------------------------------------

    def request(self, payload: Mapping[str, Any], **rollout: object) -> RolloutRequest:
        """Build and validate the request :meth:`invoke` would submit (no I/O)."""
        self._require_started()
        return build_request(
            payload,
            exp_id=self.exp_id,
            store_url=self.store.url,
            defaults=self.defaults,
            overrides=rollout,
            callback_url=self.callback_url,
        )

    def _require_started(self) -> None:
        if self._closed:
            raise UsageError("this rollout client is closed; create a new one")
        if not self._started:
            raise UsageError(
                "the rollout client is not started; use 'async with client:' or await client.start()"
            )


class RolloutClient:
    """The synchronous twin of :class:`AsyncRolloutClient` (same arguments, same methods).

    It runs the async client on a private event-loop thread, so futures keep resolving
    while your code blocks. Calling it from inside a running event loop raises
    :class:`~rollhub.errors.UsageError`: use the async client there.
    """

    def __init__(
        self, runtime: Runtime, store: ResultStore | str, *, exp_id: str, **options: Any
    ) -> None:
        ensure_no_running_loop("RolloutClient()")
        self._async = AsyncRolloutClient(runtime, store, exp_id=exp_id, **options)
        self._loop: LoopThread | None = None

    @property
    def callback_url(self) -> str | None:
        """Where agents post completion notices (None when callbacks are off)."""
        return self._async.callback_url

    @property
    def stats(self) -> dict[str, int]:
        """Counters: submitted, store reads, callbacks received, sessions lost."""
        return self._async.stats

    def start(self) -> RolloutClient:
        """Start the runtime and the callback server on the client's loop thread."""
        ensure_no_running_loop("RolloutClient.start()")
        if self._loop is None:
            self._loop = LoopThread("rollhub-client")
        self._loop.run(self._async.start())
        return self

    def invoke(
        self, payload: Mapping[str, Any], *, timeout: float | None = None, **rollout: object
    ) -> RolloutFuture:
        """Start one rollout in the background and return its future at once."""
        return self._portal().call(lambda: self._async.invoke(payload, timeout=timeout, **rollout))

    def submit_request(
        self, request: RolloutRequest, *, timeout: float | None = None
    ) -> RolloutFuture:
        """Start a prepared request in the background and return its future at once."""
        return self._portal().call(lambda: self._async.submit_request(request, timeout=timeout))

    def run_batch(
        self, payloads: Iterable[Mapping[str, Any]], **options: Any
    ) -> Iterator[BatchItem]:
        """Run many rollouts; yield a :class:`~rollhub.batch.BatchItem` per payload as each ends.

        Leaving the loop early (``break``, an exception) cancels every live rollout.
        """
        portal = self._portal()
        agen = portal.call(lambda: self._async.run_batch_async(payloads, **options))
        return portal.iterate(agen)

    def settle(self) -> None:
        """Wait until cancelled rollouts have ended (their runtime sessions stopped) and
        finished ones have handed their runtime slots back."""
        self._portal().run(self._async.settle())

    def close(self) -> None:
        """Cancel rollouts still running, stop the server, then the loop thread."""
        if self._loop is None:
            return
        ensure_no_running_loop("RolloutClient.close()")
        try:
            self._loop.run(self._async.close())
        finally:
            self._loop.stop()
            self._loop = None

    def __enter__(self) -> RolloutClient:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, payload: Mapping[str, Any], **rollout: object) -> RolloutRequest:
        """Build and validate the request :meth:`invoke` would submit (no I/O)."""
        return self._async.request(payload, **rollout)

    def _portal(self) -> LoopThread:
        ensure_no_running_loop("RolloutClient")
        if self._loop is None:
            raise UsageError(
                "the rollout client is not started; use 'with client:' or client.start()"
            )
        return self._loop
