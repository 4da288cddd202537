"""The served A2A app's task store: a2a-sdk's in-memory store that lets ended tasks go.

a2a-sdk's :class:`~a2a.server.tasks.InMemoryTaskStore` keeps every task, with its
``rollout`` artifact, for the life of the process. :class:`EvictingTaskStore` deletes an
ended task (completed, failed, canceled, rejected) ``read_grace_s`` after a client's
``GetTask`` first returned it ended, or ``ended_ttl_s`` after it ended when no client read
it; above ``max_ended`` ended tasks the oldest go first (those already read before those
not). The grace keeps the result for a client whose answer was lost and that polls again
(its default outlasts the client's default ``transient_budget_s`` of 120 s).
Tasks still being set up, parked or run are never evicted. Eviction happens on the
store's own calls (no background task).

:class:`ReadTrackingHandler` is the request handler that tells the store when a client
read an ended task.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.tasks import InMemoryTaskStore
from a2a.types import GetTaskRequest, ListTasksRequest, ListTasksResponse, Task, TaskState

__all__ = ["EvictingTaskStore", "ReadTrackingHandler"]

log = logging.getLogger(__name__)

ENDED = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_REJECTED,
    }
)


class EvictingTaskStore(InMemoryTaskStore):
    """An in-memory task store holding ended tasks for a while only.

    :param read_grace_s: how long an ended task stays after a client first read it ended.
    :param ended_ttl_s: how long an ended task that no client read stays.
    :param max_ended: the most ended tasks held; the oldest are evicted above it.
    :param clock: seconds, monotonic (tests pass a fake one).
    """

    def __init__(
        self,
        *,
        read_grace_s: float = 300.0,
        ended_ttl_s: float = 3600.0,
        max_ended: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.read_grace_s = read_grace_s
        self.ended_ttl_s = ended_ttl_s
        self.max_ended = max_ended
        self._clock = clock
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

    async def save(self, task: Task, context: ServerCallContext) -> None:
        """Save ``task``; an ended one starts its time to live."""
        await self._evict()
        await super().save(task, context)
        if task.status.state not in ENDED:
            # not ended (again): nothing to evict; an id is never reused in practice
            self._unread.pop(task.id, None)
            self._read.pop(task.id, None)
        elif task.id not in self._unread and task.id not in self._read:
            owner = ServerCallContext(user=context.user, tenant=context.tenant)
            self._unread[task.id] = (self._clock(), owner)
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
        await super().delete(task_id, context)

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


class ReadTrackingHandler(DefaultRequestHandler):
    """a2a-sdk's request handler that tells an :class:`EvictingTaskStore` when a client's
    ``GetTask`` returned an ended task (its grace period starts then)."""

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        """``GetTask``; an ended task is marked read."""
        task = await super().on_get_task(params, context)
        store = self.task_store
        if task is not None and task.status.state in ENDED and isinstance(store, EvictingTaskStore):
            store.mark_read(task.id)
        return task
