"""The server half: an a2a-sdk ``AgentExecutor`` that runs one rollout as one A2A task.

The first message of a task runs :meth:`SessionExecutor.setup_task` and parks the task at
``input-required`` (with the rollout's deadline in its metadata when the setup carried
one: :data:`~rollhub.a2a.wire.PARKED_DEADLINE_KEY`); the second runs
:meth:`SessionExecutor.run_task` and completes the task with the ``rollout`` artifact
(see :mod:`rollhub.a2a.wire`). A task runs once: a
further run message is refused, so racing messages cannot run a rollout twice. Work runs
in a task of its own per A2A task, so a cancel stops it (an async handler is cancelled
where it awaits) and ``/ping`` goes back to Healthy once it stopped. An exception that is
not the agent's (a message without the task input) fails the task with its traceback as
text; a result that is not JSON ends the rollout as an ``InvalidResultError`` naming the
key path. :meth:`SessionExecutor.cleanup_task` runs after a cancel, and when the served
app evicts a parked task whose client never came back (:mod:`rollhub.a2a.handler`).

:class:`RolloutAppExecutor` serves any :class:`~rollhub.app.RolloutApp`: setup runs the
app's ``@app.rollout_setup`` handler (none: nothing to prepare), run its
``@app.rollout_entrypoint`` with the task as payload; the returned dict is the artifact
(no result store is written). Its ``@app.rollout_teardown`` runs once per session: after
the run, after a failed setup, or when a cancel or an eviction ends the task before it.
"""

from __future__ import annotations

import asyncio
import logging
import traceback
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import Part, Task, TaskState, TaskStatus
from a2a.utils.errors import UnsupportedOperationError
from pydantic import ValidationError

from rollhub.a2a.tracked_call import TrackedCall
from rollhub.a2a.wire import (
    ARTIFACT_NAME,
    PARKED_DEADLINE_KEY,
    SETUP_DIGEST_KEY,
    data_part,
    dump_to_data,
    read_task_input,
    rollout_deadline,
    setup_digest,
)
from rollhub.app.context import PingStatus, RolloutContext, takes_context
from rollhub.app.runner import RolloutRunner
from rollhub.results.document import InvalidResultError, validate_result
from rollhub.rollout import ROLLOUT_KEY, RolloutConfig
from rollhub.sessions.base import SessionDump

__all__ = ["RolloutAppExecutor", "ServedApp", "SessionExecutor"]

log = logging.getLogger(__name__)

#: Task ids remembered as run; a task older than this many runs is long over.
MAX_REMEMBERED_RUNS = 65_536


class SessionExecutor(AgentExecutor, ABC):
    """One rollout per A2A task: setup on the first message, the run on the second.

    :param cancel_wait_s: how long a cancel waits for the work to stop before it answers.
    """

    def __init__(self, *, cancel_wait_s: float = 10.0) -> None:
        self._work: dict[str, asyncio.Task[Any]] = {}
        #: task id -> set once cancel() has reported the task canceled
        self._cancels: dict[str, asyncio.Event] = {}
        self._cancel_wait_s = cancel_wait_s
        #: ids of tasks whose run has started (insertion order: oldest first)
        self._runs: dict[str, None] = {}
        #: task id -> its context (session) id, from its first message until it ends
        self._sessions: dict[str, str] = {}

    @abstractmethod
    async def setup_task(self, task_input: dict[str, Any], session_id: str) -> None:
        """Prepare the environment for ``task_input``; raise to fail the setup."""

    @abstractmethod
    async def run_task(self, task_input: dict[str, Any], session_id: str) -> SessionDump:
        """Run the rollout; the agent's failure is a dump with ``error``."""

    def session_of(self, task_id: str) -> str | None:
        """The context (session) id of a task not yet ended, None for another."""
        return self._sessions.get(task_id)

    @property
    def busy(self) -> bool:
        """Whether any task is being set up or run."""
        return bool(self._work)

    def ping_status(self) -> PingStatus:
        """``HealthyBusy`` while a task is being set up or run, else ``Healthy``."""
        return PingStatus.HEALTHY_BUSY if self._work else PingStatus.HEALTHY

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Set up (first message of a task) or run (the message that resumes it)."""
        task_id, context_id = str(context.task_id), str(context.context_id)
        updater = TaskUpdater(event_queue, task_id, context_id)
        first = context.current_task is None
        if first:
            self._sessions[task_id] = context_id
            # the task must exist before its first status update
            # with its setup's digest: a later setup in the context must carry the same
            # task (RolloutRequestHandler refuses another)
            digest = setup_digest(context.message)
            await event_queue.enqueue_event(
                Task(
                    id=task_id,
                    context_id=context_id,
                    status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                    metadata={SETUP_DIGEST_KEY: digest} if digest is not None else None,
                )
            )
        else:
            self._claim_run(task_id)  # no await before it: racing messages cannot both pass
        await updater.start_work()
        try:
            task_input = read_task_input(context.message)
            work = asyncio.ensure_future(
                self.setup_task(task_input, context_id)
                if first
                else self.run_task(task_input, context_id)
            )
            self._work[task_id] = work
            try:
                value = await work
            finally:
                if self._work.get(task_id) is work:
                    del self._work[task_id]
                if not first:  # the run ended: the task is over whatever happens next
                    self._sessions.pop(task_id, None)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            # cancel() stopped the work; the queue must stay open until it said so
            reported = self._cancels.get(task_id)
            if reported is not None:
                await reported.wait()
            return
        except Exception as exc:
            self._sessions.pop(task_id, None)
            what = "setup" if first else "rollout"
            log.warning("%s of task %s failed: %r", what, task_id, exc)
            text = "".join(traceback.format_exception(exc))
            await updater.failed(message=updater.new_agent_message([Part(text=text)]))
            return
        if first:
            deadline = rollout_deadline(task_input)
            await updater.update_status(
                TaskState.TASK_STATE_INPUT_REQUIRED,
                message=updater.new_agent_message([Part(text="ready")]),
                metadata={PARKED_DEADLINE_KEY: deadline} if deadline is not None else None,
            )
            return
        assert isinstance(value, SessionDump)
        try:
            data = dump_to_data(value)
        except (TypeError, ValueError) as exc:
            # The agent's result, not the task, is at fault: the client gets a rollout that
            # failed with the key path, as the HTTP app stores it.
            why = _unsendable(value, exc)
            log.warning("rollout of task %s returned a result that is not JSON: %s", task_id, why)
            data = dump_to_data(SessionDump.failed("InvalidResultError", why))
        await updater.add_artifact([data_part(data)], name=ARTIFACT_NAME)
        await updater.complete()

    def _claim_run(self, task_id: str) -> None:
        """Record that ``task_id``'s run starts; raise when it started before.

        The SDK queues a task's messages: a second run message is executed once the first
        run ended, and the task it then sees is no longer new. Without this record it would
        run the rollout again and add a second ``rollout`` artifact.
        """
        if task_id in self._runs:
            log.warning("task %s: refused a second run message", task_id)
            raise UnsupportedOperationError(
                message=f"task {task_id} runs its rollout once and it has already run; "
                f"start a new task (setup, then run) for another rollout"
            )
        self._runs[task_id] = None
        while len(self._runs) > MAX_REMEMBERED_RUNS:
            # The oldest tasks ended long ago; the SDK refuses messages to ended tasks.
            self._runs.pop(next(iter(self._runs)))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Stop the task's work (waiting up to ``cancel_wait_s``) and mark it canceled."""
        task_id = str(context.task_id)
        reported = self._cancels[task_id] = asyncio.Event()
        try:
            work = self._work.get(task_id)
            if work is not None and not work.done():
                work.cancel()
                await asyncio.wait({work}, timeout=self._cancel_wait_s)
            await self.cleanup_task(task_id)
            updater = TaskUpdater(event_queue, task_id, str(context.context_id))
            await updater.cancel()
        finally:
            reported.set()
            self._cancels.pop(task_id, None)
            self._sessions.pop(task_id, None)

    async def cleanup_task(self, task_id: str) -> None:
        """Free what the task holds (default: nothing). Called after a cancel stopped the
        task's work, and when a parked task is evicted because its client never sent the
        next message."""


@runtime_checkable
class ServedApp(Protocol):
    """What :class:`RolloutAppExecutor` uses of a :class:`~rollhub.app.RolloutApp` (its
    ``rollout_setup_handler`` and ``rollout_teardown_handler``, when it has them, are read
    too)."""

    @property
    def rollout_handler(self) -> Callable[..., object] | None:
        """The ``@app.rollout_entrypoint`` handler."""
        ...

    @property
    def runner(self) -> RolloutRunner:
        """Runs handlers off the serving loop."""
        ...


class RolloutAppExecutor(SessionExecutor):
    """Serves a :class:`~rollhub.app.RolloutApp`'s handlers over A2A.

    :param app: the app; its ``@app.rollout_entrypoint`` runs each rollout, its
        ``@app.rollout_setup`` (if any) each setup and its ``@app.rollout_teardown`` (if
        any) once per session: after the run, after a setup that failed, or on a cancel
        or an eviction before the run. All run off the serving loop, as under HTTP.
    """

    def __init__(self, app: ServedApp, *, cancel_wait_s: float = 10.0) -> None:
        super().__init__(cancel_wait_s=cancel_wait_s)
        self.app = app
        #: session id -> the task input of a set-up session still to be torn down
        self._prepared: dict[str, dict[str, Any]] = {}
        #: session id -> its setup or run handler that a cancel left running
        self._left_running: dict[str, TrackedCall] = {}

    async def setup_task(self, task_input: dict[str, Any], session_id: str) -> None:
        if getattr(self.app, "rollout_teardown_handler", None) is not None:
            self._prepared[session_id] = task_input
        handler = getattr(self.app, "rollout_setup_handler", None)
        if handler is None:
            return
        try:
            await self._call(handler, task_input, session_id)
        except Exception:  # what the setup made before it failed is freed too
            await self._teardown(session_id)
            raise

    async def run_task(self, task_input: dict[str, Any], session_id: str) -> SessionDump:
        handler = self.app.rollout_handler
        if handler is None:
            raise RuntimeError("the app has no @app.rollout_entrypoint handler")
        try:
            result = await self._call(handler, task_input, session_id)
        except asyncio.CancelledError:
            await self._teardown(session_id)
            raise
        except Exception as exc:
            text = "".join(traceback.format_exception(exc))
            self._teardown_later(session_id)
            return SessionDump.failed(type(exc).__name__, str(exc), text)
        self._teardown_later(session_id)
        return SessionDump.from_result(result)

    def _teardown_later(self, session_id: str) -> None:
        """The run ended: its teardown starts now and runs beside the reporting of the
        rollout, so a slow one (a sandbox deleted) never delays the result or counts
        against the run's time; the app's shutdown waits for it."""
        self.app.runner.spawn(self._teardown(session_id))

    async def cleanup_task(self, task_id: str) -> None:
        session_id = self.session_of(task_id)
        if session_id is not None:
            await self._teardown(session_id)

    async def _call(
        self, handler: Callable[..., object], task_input: dict[str, Any], session_id: str
    ) -> object:
        """Run a setup or run handler; when a cancel leaves it running, note it so that
        the teardown waits for its end."""
        call = TrackedCall(handler)
        try:
            return await self.app.runner.call(call.handler, _args(handler, task_input, session_id))
        except asyncio.CancelledError:
            if call.abandon() and session_id in self._prepared:
                self._left_running[session_id] = call
            raise

    async def _teardown(self, session_id: str) -> None:
        """Run ``@app.rollout_teardown`` for a set-up session, once; a failure is logged.

        When a cancel left its setup or run handler running, the teardown runs in the
        background once that handler returned: what it makes until then is freed too.
        """
        task_input = self._prepared.pop(session_id, None)
        left = self._left_running.pop(session_id, None)
        handler = getattr(self.app, "rollout_teardown_handler", None)
        if task_input is None or handler is None:
            return
        if left is not None:
            self.app.runner.spawn(self._teardown_after(left, handler, task_input, session_id))
            return
        await self._run_teardown(handler, task_input, session_id)

    async def _teardown_after(
        self,
        left: TrackedCall,
        handler: Callable[..., object],
        task_input: dict[str, Any],
        session_id: str,
    ) -> None:
        log.info("session %s: its teardown waits for its cancelled handler to return",
                 session_id)  # fmt: skip
        await left.stopped()
        await self._run_teardown(handler, task_input, session_id)

    async def _run_teardown(
        self, handler: Callable[..., object], task_input: dict[str, Any], session_id: str
    ) -> None:
        try:
            await asyncio.shield(
                self.app.runner.call(handler, _args(handler, task_input, session_id))
            )
        except Exception:
            log.exception("teardown of session %s failed", session_id)


def _args(
    handler: Callable[..., object], task_input: dict[str, Any], session_id: str
) -> tuple[object, ...]:
    """``(payload,)`` or ``(payload, context)``: the context's rollout is the task's
    ``_rollout`` when it is a valid one (a rollhub hub's task), else None."""
    if not takes_context(handler):
        return (task_input,)
    rollout = None
    raw = task_input.get(ROLLOUT_KEY)
    if isinstance(raw, dict):
        try:
            rollout = RolloutConfig.model_validate(raw)
        except ValidationError:
            log.info("task %s: its %s is not rollhub's; context.rollout is None", session_id,
                     ROLLOUT_KEY)  # fmt: skip
    sid = rollout.session_id if rollout is not None else session_id
    return (task_input, RolloutContext(session_id=sid, rollout=rollout))


def _unsendable(dump: SessionDump, exc: Exception) -> str:
    """Why ``dump`` cannot be sent: the key path of the culprit when the result holds it."""
    if isinstance(dump.result, dict):
        try:
            validate_result(dump.result)
        except InvalidResultError as named:
            return str(named)
    return f"the rollout's result is not JSON: {exc}"
