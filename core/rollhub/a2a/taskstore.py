"""The served A2A app's task store: a2a-sdk's in-memory store that lets tasks go.

a2a-sdk's :class:`~a2a.server.tasks.InMemoryTaskStore` keeps every task, with its
``rollout`` artifact, for the life of the process. :class:`EvictingTaskStore` deletes an
ended task (completed, failed, canceled, rejected) ``read_grace_s`` after a client's
``GetTask`` first returned it ended, or ``ended_ttl_s`` after it ended when no client read
it; above ``max_ended`` ended tasks the oldest go first (those already read before those
not). The grace keeps the result for a client whose answer was lost and that polls again
(its default outlasts the client's default ``transient_budget_s`` of 120 s). Eviction of
ended tasks happens on the store's own calls (no background task).

A parked task (``input-required``: set up, waiting for its run message) whose client died
would stay forever. The store tracks each one, and
:meth:`EvictingTaskStore.take_expired_parked` hands over those past their bound:
``parked_idle_s`` with no ``GetTask`` or message from its client, or by default
``deadline_grace_s`` past the rollout's deadline (the client has given up by then) when
its setup carried one, else :data:`DEFAULT_PARKED_IDLE_S`. The request handler
(:mod:`rollhub.a2a.handler`) cancels them, which runs the executor's cleanup, and deletes
them. Tasks being set up or run are never evicted.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from a2a.server.context import ServerCallContext
from a2a.server.tasks import InMemoryTaskStore
from a2a.types import ListTasksRequest, ListTasksResponse, Task, TaskState

from rollhub.a2a.wire import PARKED_DEADLINE_KEY, task_metadata
from rollhub.errors import ConfigError

__all__ = ["DEFAULT_PARKED_IDLE_S", "ENDED", "PARKED", "EvictingTaskStore", "ExpiredParked"]

log = logging.getLogger(__name__)

ENDED = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_REJECTED,
    }
)
#: waiting for the client's next message
PARKED = frozenset({TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED})
#: how long a parked task without a rollout deadline waits for its client, by default
DEFAULT_PARKED_IDLE_S = 3600.0
#: parked tasks past their bound: (task id, owner context, why) each
ExpiredParked = list[tuple[str, ServerCallContext, str]]


@dataclass
class _Parked:
    """A parked task: when its client last showed, its rollout's deadline, its owner."""

    touched: float
    deadline_at: float | None
    owner: ServerCallContext
    #: messages to it being handled (it is not evicted under them)
    held: int = 0


class EvictingTaskStore(InMemoryTaskStore):
    """An in-memory task store holding ended tasks for a while only, and tracking parked
    tasks for eviction.

    :param read_grace_s: how long an ended task stays after a client first read it ended.
    :param ended_ttl_s: how long an ended task that no client read stays.
    :param max_ended: the most ended tasks held; the oldest are evicted above it.
    :param parked_idle_s: how long a parked task stays with no ``GetTask`` or message from
        its client. None: until ``deadline_grace_s`` past its rollout's deadline when its
        setup carried one, else :data:`DEFAULT_PARKED_IDLE_S` idle.
    :param deadline_grace_s: how long past its rollout's deadline a parked task stays
        (clock skew between client and server, a client's last calls).
    :param sweep_s: how often the served app looks for parked tasks to evict (default: a
        quarter of ``parked_idle_s``, at most 10 s).
    :param clock: seconds, monotonic (tests pass a fake one).
    :param wall_clock: epoch seconds, what rollout deadlines are in.
    :raises ConfigError: ``parked_idle_s`` or ``sweep_s`` not a finite number > 0, or
        ``deadline_grace_s`` not one >= 0.
    """

    def __init__(
        self,
        *,
        read_grace_s: float = 300.0,
        ended_ttl_s: float = 3600.0,
        max_ended: int = 4096,
        parked_idle_s: float | None = None,
        deadline_grace_s: float = 300.0,
        sweep_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        _check_seconds("parked_idle_s", parked_idle_s, positive=True)
        _check_seconds("sweep_s", sweep_s, positive=True)
        _check_seconds("deadline_grace_s", deadline_grace_s, positive=False)
        super().__init__()
        self.read_grace_s = read_grace_s
        self.ended_ttl_s = ended_ttl_s
        self.max_ended = max_ended
        self.parked_idle_s = parked_idle_s
        self.deadline_grace_s = deadline_grace_s
        if sweep_s is None:
            idle_s = DEFAULT_PARKED_IDLE_S if parked_idle_s is None else parked_idle_s
            sweep_s = min(10.0, idle_s / 4)
        self.sweep_s = sweep_s
        self._clock = clock
        self._wall_clock = wall_clock
        #: parked: task id -> when its client last showed, deadline, owner
        self._parked: dict[str, _Parked] = {}
        # Insertion order is deadline order within each dict (one delay per dict), so the
        # expired ones are always at the front. Each keeps the owner's context to delete
        # with: the SDK's store is partitioned by the caller's user.
        #: ended, never read: task id -> (ended at, owner context)
        self._unread: dict[str, tuple[float, ServerCallContext]] = {}
        #: ended and read: task id -> (first read at, owner context)
        self._read: dict[str, tuple[float, ServerCallContext]] = {}

    @property
    def ended(self) -> int:
        """How many ended tasks are held."""
        return len(self._unread) + len(self._read)

    @property
    def parked(self) -> int:
        """How many parked tasks are held."""
        return len(self._parked)

    async def save(self, task: Task, context: ServerCallContext) -> None:
        """Save ``task``; an ended one starts its time to live, a parked one its bound."""
        await self._evict()
        await super().save(task, context)
        state = task.status.state
        if state in PARKED:
            entry = self._parked.get(task.id)
            if entry is None:
                self._parked[task.id] = _Parked(self._clock(), _deadline(task), _owner(context))
            else:
                entry.touched, entry.deadline_at = self._clock(), _deadline(task)
        else:
            self._parked.pop(task.id, None)
        if state not in ENDED:
            # not ended (again): nothing to evict; an id is never reused in practice
            self._unread.pop(task.id, None)
            self._read.pop(task.id, None)
        elif task.id not in self._unread and task.id not in self._read:
            self._unread[task.id] = (self._clock(), _owner(context))
            await self._evict()

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        """The task, unless it was evicted (or never existed)."""
        await self._evict()
        return await super().get(task_id, context)

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        """The tasks still held that match ``params``."""
        await self._evict()
        return await super().list(params, context)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        """Delete the task and forget its time to live."""
        self._unread.pop(task_id, None)
        self._read.pop(task_id, None)
        self._parked.pop(task_id, None)
        await super().delete(task_id, context)

    def touch(self, task_id: str) -> None:
        """A client showed for ``task_id``: a parked task's idle time starts again."""
        entry = self._parked.get(task_id)
        if entry is not None:
            entry.touched = self._clock()

    @contextlib.contextmanager
    def holding(self, task_id: str) -> Iterator[None]:
        """``task_id`` is not evicted inside the block (a message to it is being handled);
        when it is still parked after, its idle time starts again."""
        entry = self._parked.get(task_id)
        if entry is not None:
            entry.held += 1
        try:
            yield
        finally:
            if entry is not None:
                entry.held -= 1
            self.touch(task_id)

    def take_expired_parked(self) -> ExpiredParked:
        """The parked tasks past their bound, no longer tracked: ``(task id, owner context,
        why)`` each. The caller evicts them."""
        now, wall = self._clock(), self._wall_clock()
        expired: ExpiredParked = []
        for task_id, entry in self._parked.items():
            if entry.held:
                continue
            if self.parked_idle_s is None and entry.deadline_at is not None:
                if wall - entry.deadline_at >= self.deadline_grace_s:
                    expired.append((task_id, entry.owner, (
                        f"still parked {wall - entry.deadline_at:.1f}s after its rollout's "
                        f"deadline (deadline_grace_s={self.deadline_grace_s:g})"
                    )))  # fmt: skip
                continue
            idle_s = DEFAULT_PARKED_IDLE_S if self.parked_idle_s is None else self.parked_idle_s
            if now - entry.touched >= idle_s:
                expired.append((task_id, entry.owner, (
                    f"parked {now - entry.touched:.1f}s with no message from its client "
                    f"(parked_idle_s={idle_s:g})"
                )))  # fmt: skip
        for task_id, _, _ in expired:
            del self._parked[task_id]
        return expired

    def mark_read(self, task_id: str) -> None:
        """A client read ``task_id`` ended: it goes ``read_grace_s`` from now."""
        entry = self._unread.pop(task_id, None)
        if entry is not None:
            self._read[task_id] = (self._clock(), entry[1])

    async def _evict(self) -> None:
        now = self._clock()
        for held, keep_s in ((self._read, self.read_grace_s), (self._unread, self.ended_ttl_s)):
            while held:
                task_id, (since, _) = next(iter(held.items()))
                if now - since < keep_s:
                    break
                await self._drop(held, task_id)
        while self.ended > self.max_ended:
            # read ones first: their client has the result already
            held = self._read or self._unread
            await self._drop(held, next(iter(held)))

    async def _drop(self, held: dict[str, tuple[float, ServerCallContext]], task_id: str) -> None:
        _, owner = held.pop(task_id)
        log.debug("evicting ended task %s", task_id)
        await super().delete(task_id, owner)


def _check_seconds(name: str, value: float | None, *, positive: bool) -> None:
    """Refuse a bound that is not a finite number of seconds (> 0, or >= 0): a sweep every
    0 s never sleeps, an idle bound of 0 evicts every task as it parks, NaN evicts none."""
    if value is None:
        return
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        least = "> 0" if positive else ">= 0"
        raise ConfigError(f"{name}={value!r}: use a finite number of seconds {least}", field=name)


def _owner(context: ServerCallContext) -> ServerCallContext:
    """A context naming the same owner as ``context``: the SDK's store is partitioned by
    the caller's user, so a later delete must come as that user."""
    return ServerCallContext(user=context.user, tenant=context.tenant)


def _deadline(task: Task) -> float | None:
    """The rollout deadline the executor put in a parked task's metadata."""
    value = task_metadata(task).get(PARKED_DEADLINE_KEY)
    return float(value) if isinstance(value, int | float) else None
