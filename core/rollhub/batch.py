"""Batch runs: many payloads, bounded concurrency, one terminal item per payload.

::

    async with AsyncRolloutClient(runtime, store, exp_id="exp1") as client:
        async for item in client.run_batch_async(payloads, max_concurrent=64):
            print(item.index, item.status, item.result)

Guarantees: every payload yields exactly one :class:`BatchItem` (in completion order);
leaving the loop early (``break``, an exception) cancels every live session and every
pending submission; a stored error result is ``agent_error``, never a success. With
``resume=True`` (the default) inputs whose ok result is already stored under the same
``exp_id`` are not run again: they are yielded first, marked ``resumed``.

Input ids are deterministic, so a rerun finds its earlier results: the payload's
``id_field`` value when it is a valid key part, else a hash of the payload's content;
repeated ids get ``.1``, ``.2``… suffixes in payload order.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from rollhub.errors import ConfigError
from rollhub.results.document import read_result, read_status
from rollhub.rollout import content_input_id, validate_key_part
from rollhub.stores.base import ResultStore
from rollhub.submission.future import RolloutFuture
from rollhub.submission.outcome import ErrorInfo, RolloutOutcome, Status
from rollhub.submission.progress import RolloutProgress

__all__ = ["BatchClient", "BatchItem", "assign_input_ids", "run_batch_async"]

log = logging.getLogger(__name__)


class BatchClient(Protocol):
    """What a batch needs of a client: :class:`~rollhub.client.AsyncRolloutClient` is one."""

    store: ResultStore
    exp_id: str

    def invoke(
        self, payload: Mapping[str, Any], *, timeout: float | None = None, **rollout: object
    ) -> RolloutFuture:
        """Start one rollout in the background and return its future at once."""
        ...

    async def settle(self) -> None:
        """Wait until cancelled rollouts have ended."""
        ...


@dataclass(frozen=True)
class BatchItem:
    """The terminal item of one payload of a batch: its position and how its rollout ended.

    ``outcome`` is the rollout's one record: for a run rollout, the very
    :class:`~rollhub.submission.outcome.RolloutOutcome` its future resolved with. An input whose
    result was already stored has a ``resumed`` outcome read from that document; one refused
    before a session was made for it (``submit_error``) has an empty ``session_id``. The
    other attributes are the outcome's, read from it.
    """

    index: int
    outcome: RolloutOutcome

    @property
    def input_id(self) -> str:
        """The payload's input id."""
        return self.outcome.input_id

    @property
    def session_id(self) -> str | None:
        """The rollout's last runtime session (None when none was made)."""
        return self.outcome.session_id or None

    @property
    def status(self) -> Status:
        """How the rollout ended."""
        return self.outcome.status

    @property
    def result(self) -> dict[str, Any] | None:
        """The agent's result (without rollhub's metadata)."""
        return self.outcome.result

    @property
    def error(self) -> ErrorInfo | None:
        """Why the rollout failed (None when it is ``ok``)."""
        return self.outcome.error

    @property
    def elapsed(self) -> float | None:
        """Seconds from submission to the terminal outcome."""
        return self.outcome.elapsed

    @property
    def resumed(self) -> bool:
        """True when the result was stored by an earlier run and not run again."""
        return self.outcome.resumed

    @property
    def ok(self) -> bool:
        """True when the agent's result was stored with status ok."""
        return self.outcome.ok


def assign_input_ids(
    payloads: Sequence[Mapping[str, Any]],
    *,
    id_field: str = "id",
    input_ids: Sequence[str] | None = None,
) -> list[str]:
    """Deterministic, unique input ids for ``payloads`` (see the module docstring).

    :raises ConfigError: ``input_ids`` has the wrong length or an invalid id.
    """
    if input_ids is not None:
        if len(input_ids) != len(payloads):
            raise ConfigError(
                f"input_ids has {len(input_ids)} ids for {len(payloads)} payloads; give one per payload"
            )
        base = []
        for i, value in enumerate(input_ids):
            try:
                base.append(validate_key_part(str(value), f"input_ids[{i}]"))
            except ValueError as exc:
                raise ConfigError(str(exc), field=f"input_ids[{i}]") from exc
    else:
        base = [_id_of(p, id_field) for p in payloads]
    seen: dict[str, int] = {}
    out = []
    for value in base:
        n = seen.get(value, 0)
        seen[value] = n + 1
        out.append(value if n == 0 else f"{value}.{n}")
    return out


def _id_of(payload: Mapping[str, Any], id_field: str) -> str:
    value = payload.get(id_field) if isinstance(payload, Mapping) else None
    if isinstance(value, str | int) and not isinstance(value, bool):
        try:
            return validate_key_part(str(value), id_field)
        except ValueError:
            return content_input_id(value)
    return content_input_id(payload)


#: stored documents read at once when a batch resumes
RESUME_READS = 16


async def _stored_results(
    client: BatchClient, ids: Sequence[str], rerun_failed: bool
) -> dict[str, tuple[str, dict[str, Any]]]:
    """input_id -> (key, document) of a stored result to reuse.

    One ``list`` of ``{exp_id}/``, then the candidate documents, read
    :data:`RESUME_READS` at a time (an S3 GET takes milliseconds; thousands in a row
    would delay the first new rollout by minutes).
    """
    store = client.store
    wanted = set(ids)
    keys = await asyncio.to_thread(store.list, f"{client.exp_id}/")
    by_input: dict[str, list[str]] = {}
    for key in keys:
        parts = key.split("/")
        if len(parts) == 3 and parts[1] in wanted and parts[2].endswith(".json"):
            by_input.setdefault(parts[1], []).append(key)
    gate = asyncio.Semaphore(RESUME_READS)

    async def pick(candidates: list[str]) -> tuple[str, dict[str, Any]] | None:
        fallback = None
        for key in candidates:
            async with gate:
                doc = await asyncio.to_thread(store.get, key)
            if doc is None:
                continue
            try:
                status = read_status(doc)
            except ValueError:
                continue
            if status == "ok":
                return key, doc
            fallback = fallback or (key, doc)
        return None if rerun_failed else fallback

    inputs = list(by_input)
    picked = await asyncio.gather(*(pick(by_input[i]) for i in inputs))
    return {i: p for i, p in zip(inputs, picked, strict=True) if p is not None}


def _resumed_item(
    client: BatchClient, index: int, input_id: str, key: str, doc: dict[str, Any]
) -> BatchItem:
    view = read_result(doc)
    error = None
    if view.status != "ok":
        err = view.error or {}
        error = ErrorInfo(str(err.get("type")), str(err.get("message")), err.get("traceback"))
    outcome = RolloutOutcome(
        session_id=key.rsplit("/", 1)[-1][: -len(".json")],
        exp_id=client.exp_id,
        input_id=input_id,
        result_key=key,
        status="ok" if view.status == "ok" else _stored_error_status(error),
        result=view.result,
        error=error,
        document=doc,
        resumed=True,
    )
    return BatchItem(index, outcome)


def _stored_error_status(error: ErrorInfo | None) -> Status:
    """The status a stored error document stands for (as the run that wrote it reported)."""
    kind = error.type if error is not None else ""
    if kind == "RolloutTimeout":
        return "timeout"
    if kind == "CancelledError":
        return "cancelled"
    return "agent_error"


def _item(index: int, fut: RolloutFuture) -> BatchItem:
    return BatchItem(index, fut._outcome.result())


def _refused_item(client: BatchClient, index: int, input_id: str, exc: Exception) -> BatchItem:
    """The item of a payload the client refused before it made a session for it."""
    outcome = RolloutOutcome(
        session_id="",
        exp_id=client.exp_id,
        input_id=input_id,
        result_key="",
        status="submit_error",
        error=ErrorInfo.from_exception(exc),
    )
    return BatchItem(index, outcome)


async def run_batch_async(
    client: BatchClient,
    payloads: Iterable[Mapping[str, Any]],
    *,
    max_concurrent: int = 16,
    timeout: float | None = None,
    id_field: str = "id",
    input_ids: Sequence[str] | None = None,
    resume: bool = True,
    rerun_failed: bool = True,
    progress: bool | None = None,
    **rollout: object,
) -> AsyncIterator[BatchItem]:
    """Run every payload through ``client``; yield one :class:`BatchItem` each as it ends.

    :param payloads: the agent inputs (JSON objects); read into a list first.
    :param max_concurrent: rollouts in flight at once (submissions included).
    :param timeout: deadline of each rollout in seconds (default: the client's).
    :param id_field: payload field holding the input id.
    :param input_ids: explicit input ids, one per payload (overrides ``id_field``).
    :param resume: reuse ok results already stored under this ``exp_id``.
    :param rerun_failed: with ``resume``, run inputs whose stored result is an error again
        (False yields those stored errors as resumed ``agent_error`` items).
    :param progress: draw a progress bar (None: only on a terminal).
    :param rollout: ``_rollout`` overrides for every rollout.
    :raises ConfigError: ``max_concurrent`` < 1, bad ``input_ids``, or a per-rollout field
        (``session_id``, ``input_id``, ``exp_id``) in ``rollout``, before anything runs.
    """
    if max_concurrent < 1:
        raise ConfigError(f"max_concurrent={max_concurrent!r} must be >= 1")
    per_rollout = sorted({"session_id", "input_id", "exp_id"} & set(rollout))
    if per_rollout:
        raise ConfigError(
            f"run_batch: {', '.join(per_rollout)} cannot be shared by every rollout of a batch; "
            f"use input_ids= (one per payload) and let the client make session ids",
            field=per_rollout[0],
        )
    # agentcore-rl-toolkit's run_batch options: client settings, never _rollout fields
    upstream = sorted({"max_concurrent_sessions", "initial_interval", "max_interval",
                       "backoff_factor", "log_interval"} & set(rollout))
    if upstream:
        fix = ("max_concurrent=N" if upstream[0] == "max_concurrent_sessions"
               else "progress= (or poll_initial_s/poll_max_s on the client)")
        raise ConfigError(f"run_batch: {upstream[0]}= is not a _rollout field; use {fix}",
                          field=upstream[0])
    items = list(payloads)
    ids = assign_input_ids(items, id_field=id_field, input_ids=input_ids)
    stored = await _stored_results(client, ids, rerun_failed) if resume and items else {}
    bar = RolloutProgress(len(items), enabled=progress)
    pending = deque(i for i in range(len(items)) if ids[i] not in stored)
    live: dict[asyncio.Future[Any], tuple[int, RolloutFuture]] = {}
    try:
        for i, input_id in enumerate(ids):
            if input_id in stored:
                key, doc = stored[input_id]
                item = _resumed_item(client, i, input_id, key, doc)
                bar.finished(item.status, resumed=True, was_running=False)
                yield item
        while pending or live:
            while pending and len(live) < max_concurrent:
                i = pending.popleft()
                try:
                    fut = client.invoke(
                        items[i], timeout=timeout, **{**rollout, "input_id": ids[i]}
                    )
                except ConfigError as exc:
                    bar.finished("submit_error", was_running=False)
                    yield _refused_item(client, i, ids[i], exc)
                    continue
                live[fut._outcome] = (i, fut)
                bar.started()
            if not live:
                continue
            done, _ = await asyncio.wait(live, return_when=asyncio.FIRST_COMPLETED)
            for waiter in done:
                i, fut = live.pop(waiter)
                item = _item(i, fut)
                bar.finished(item.status)
                yield item
    finally:
        for _i, fut in live.values():
            fut.cancel()
        if live:
            log.info("batch stopped early: cancelled %d live rollouts", len(live))
            await client.settle()
        bar.close()
