"""The served A2A app's request handler: a2a-sdk's, plus what rollout sessions need.

:class:`RolloutRequestHandler` is a2a-sdk's ``DefaultRequestHandler`` that

- tells an :class:`~rollhub.a2a.taskstore.EvictingTaskStore` when a client's ``GetTask``
  returned an ended task (its grace period starts then), and when a client showed for a
  parked task (``GetTask``, a message: its idle time starts again);
- evicts the parked tasks the store finds past their bound, every ``sweep_s`` from the
  first message on: each is cancelled as a client's ``CancelTask`` would cancel it (so
  the executor's :meth:`~rollhub.a2a.executor.SessionExecutor.cleanup_task` frees what
  its setup holds), then deleted. A client that comes back for it gets
  ``TaskNotFoundError`` (JSON-RPC -32001) saying that it was evicted and why; rollhub's
  client ends the session as lost (transient: the rollout gets a new session);
- sets each context up once: a setup message (one without a task id) in a context that
  holds a task is answered with that task instead of starting a second setup, and setup
  messages of one context are handled one after the other, so one that arrives while the
  first is still being handled gets the first's task too. A client that resent a setup
  whose answer was lost thus attaches to the one session of its context. A setup that
  carries another task input than the context's first is refused (``InvalidParamsError``,
  JSON-RPC -32602), as the HTTP app answers 409 to a session id reused for another payload:
  attached, it would run the first task's rollout under the second's name.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from a2a.server.agent_execution import AgentExecutor
from a2a.server.context import ServerCallContext
from a2a.server.owner_resolver import resolve_user_scope
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.tasks import TaskStore
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    SendMessageRequest,
    Task,
)
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError

from rollhub.a2a.taskstore import ENDED, EvictingTaskStore
from rollhub.a2a.wire import SETUP_DIGEST_KEY, setup_digest, task_metadata

__all__ = ["MAX_REMEMBERED_EVICTIONS", "RolloutRequestHandler"]

log = logging.getLogger(__name__)

#: Evicted task ids remembered (to say why they are gone); the oldest are forgotten first.
MAX_REMEMBERED_EVICTIONS = 16_384


class RolloutRequestHandler(DefaultRequestHandler):
    """a2a-sdk's request handler with eviction of parked tasks and one setup per context
    (see the module docstring); its arguments are ``DefaultRequestHandler``'s."""

    def __init__(
        self,
        agent_executor: AgentExecutor,
        task_store: TaskStore,
        agent_card: AgentCard,
        **options: Any,
    ) -> None:
        super().__init__(agent_executor, task_store, agent_card, **options)
        #: evicted task id -> why (insertion order: oldest first)
        self._evicted: dict[str, str] = {}
        #: (owner, context id) -> done once the setup message being handled was answered
        self._setting_up: dict[tuple[str, str], asyncio.Future[None]] = {}
        self._sweeper: asyncio.Task[None] | None = None

    @property
    def _store(self) -> EvictingTaskStore | None:
        store = self.task_store
        return store if isinstance(store, EvictingTaskStore) else None

    # Requests ----------------------------------------------------------------------------

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        """``GetTask``; a parked task's idle time starts again, an ended one is marked read."""
        self._refuse_evicted(params.id)
        store = self._store
        if store is not None:
            store.touch(params.id)
        task = await super().on_get_task(params, context)
        if task is not None and store is not None and task.status.state in ENDED:
            store.mark_read(task.id)
        return task

    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Message | Task:
        """``SendMessage``: a message to a task resumes it (not while it is being evicted);
        a setup message in a context that holds a task gets that task."""
        self._start_sweeping()
        message = params.message
        store = self._store
        if message.task_id:
            self._refuse_evicted(message.task_id)
            if store is None:
                return await super().on_message_send(params, context)
            with store.holding(message.task_id):  # no await before it: eviction cannot race
                return await super().on_message_send(params, context)
        if not message.context_id:
            return await super().on_message_send(params, context)
        return await self._set_up_once(params, context)

    async def on_cancel_task(
        self, params: CancelTaskRequest, context: ServerCallContext
    ) -> Task | None:
        """``CancelTask``; an evicted task is gone (it was cancelled when evicted)."""
        self._refuse_evicted(params.id)
        return await super().on_cancel_task(params, context)

    def _refuse_evicted(self, task_id: str) -> None:
        why = self._evicted.get(task_id)
        if why is not None:
            raise TaskNotFoundError(
                message=f"task {task_id} was evicted: {why}", data={"evicted": why}
            )

    # One setup per context ---------------------------------------------------------------

    async def _set_up_once(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Message | Task:
        context_id = params.message.context_id
        key = (resolve_user_scope(context), context_id)
        while (pending := self._setting_up.get(key)) is not None:
            await asyncio.shield(pending)
        mine = self._setting_up[key] = asyncio.get_running_loop().create_future()
        try:
            first = await self._task_in_context(context_id, context)
            if first is not None:
                _refuse_another_input(first, params.message)
                log.warning("context %s: answered a further setup message with its task %s",
                            context_id, first.id)  # fmt: skip
                return first
            return await super().on_message_send(params, context)
        finally:
            del self._setting_up[key]
            mine.set_result(None)

    async def _task_in_context(self, context_id: str, context: ServerCallContext) -> Task | None:
        """The context's live task (else its latest ended one), None when it holds none."""
        page = await self.task_store.list(ListTasksRequest(context_id=context_id), context)
        tasks = list(page.tasks)
        live = [t for t in tasks if t.status.state not in ENDED]
        return (live or tasks)[0] if tasks else None

    # Eviction of parked tasks ------------------------------------------------------------

    async def evict_parked(self) -> list[str]:
        """Cancel and delete the parked tasks past their bound; returns their ids."""
        store = self._store
        if store is None:
            return []
        expired = store.take_expired_parked()
        # All of them before the first await: the store no longer holds them for a message,
        # so a run message to one still waiting its turn here would start a rollout that
        # its eviction then cancels.
        for task_id, _, why in expired:
            self._evicted[task_id] = why
        while len(self._evicted) > MAX_REMEMBERED_EVICTIONS:
            self._evicted.pop(next(iter(self._evicted)))
        evicted = []
        for task_id, owner, why in expired:
            log.warning("evicting task %s: %s", task_id, why)
            try:
                # the SDK's own cancel: the executor frees the setup's resources, and the
                # SDK lets go of the task's in-memory workers
                await super().on_cancel_task(CancelTaskRequest(id=task_id), owner)
            except Exception as exc:
                log.warning("cancelling evicted task %s failed: %r", task_id, exc)
            finally:
                await store.delete(task_id, owner)
            evicted.append(task_id)
        return evicted

    def _start_sweeping(self) -> None:
        store = self._store
        if store is None or self._sweeper is not None:
            return
        self._sweeper = asyncio.get_running_loop().create_task(
            self._sweep(store.sweep_s), name="rollhub-a2a-evict-parked"
        )

    async def _sweep(self, every_s: float) -> None:
        while True:
            await asyncio.sleep(every_s)
            try:
                await self.evict_parked()
            except Exception:  # the next sweep tries again; serving goes on
                log.exception("evicting parked tasks failed")

    async def stop_sweeping(self) -> None:
        """Stop looking for parked tasks to evict (the app's shutdown); the next message
        starts it again."""
        sweeper, self._sweeper = self._sweeper, None
        if sweeper is not None:
            sweeper.cancel()
            await asyncio.wait({sweeper})


def _refuse_another_input(first: Task, message: Message) -> None:
    """Raise when ``message`` (a setup) carries another task input than the one ``first``
    was set up with; either digest missing (not plain JSON, a task made elsewhere) lets it
    attach."""
    had = task_metadata(first).get(SETUP_DIGEST_KEY)
    new = setup_digest(message)
    if isinstance(had, str) and new is not None and new != had:
        raise InvalidParamsError(
            message=f"context {first.context_id} was set up as task {first.id} with another "
            f"task input: a context is one rollout session; set up this task in a new context "
            f"(a new session id)"
        )
