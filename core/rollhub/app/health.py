"""``/ping`` state: Healthy or HealthyBusy, forced, custom, or from running work.

The same methods as the AgentCore app (``ping``, ``force_ping_status``, ``add_async_task``,
``complete_async_task``, ``async_task``), so code written against it keeps working.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from rollhub.app.context import PingStatus

_P = ParamSpec("_P")
_T = TypeVar("_T")

__all__ = ["HealthState"]

log = logging.getLogger(__name__)


class HealthState:
    """Mixin of :class:`~rollhub.app.RolloutApp` that decides what ``GET /ping`` says.

    Busy means: a rollout is running (:meth:`_busy`) or work registered with
    :meth:`add_async_task` is. ``time_of_last_update`` is when the status last changed.
    """

    def _init_health(self) -> None:
        self._ping_handler: Callable[[], Any] | None = None
        self._forced_ping_status: PingStatus | None = None
        self._async_tasks: dict[int, dict[str, Any]] = {}
        self._task_lock = threading.Lock()
        self._last_status: PingStatus = PingStatus.HEALTHY
        self._last_status_update_time = time.time()

    def _busy(self) -> bool:
        return bool(self._async_tasks)

    def ping(self, func: Callable[[], Any]) -> Callable[[], Any]:
        """Register a custom ping status function (returns a ``PingStatus`` or its value)."""
        self._ping_handler = func
        return func

    def get_current_ping_status(self) -> PingStatus:
        """Forced status, else the custom ping function, else Busy while work is running."""
        status: PingStatus | None = self._forced_ping_status
        if status is None and self._ping_handler is not None:
            try:
                value = self._ping_handler()
                status = PingStatus(value) if value is not None else None
            except Exception as exc:
                log.warning("custom ping handler failed, using automatic status: %s", exc)
        if status is None:
            busy = self._busy()
            status = PingStatus.HEALTHY_BUSY if busy else PingStatus.HEALTHY
        if status != self._last_status:
            self._last_status = status
            self._last_status_update_time = time.time()
        return status

    def _refresh_status(self) -> None:
        self.get_current_ping_status()

    def force_ping_status(self, status: PingStatus) -> None:
        """Report ``status`` until :meth:`clear_forced_ping_status`."""
        self._forced_ping_status = PingStatus(status)
        self._refresh_status()

    def clear_forced_ping_status(self) -> None:
        """Go back to the automatic status."""
        self._forced_ping_status = None
        self._refresh_status()

    def add_async_task(self, name: str, metadata: dict[str, Any] | None = None) -> int:
        """Mark your own background work as running (``/ping`` says HealthyBusy)."""
        with self._task_lock:
            task_id = uuid.uuid4().int >> 64
            self._async_tasks[task_id] = {
                "name": name,
                "start_time": time.time(),
                **({"metadata": metadata} if metadata else {}),
            }
        self._refresh_status()
        return task_id

    def complete_async_task(self, task_id: int) -> bool:
        """Mark work from :meth:`add_async_task` as done; False for an unknown id."""
        with self._task_lock:
            found = self._async_tasks.pop(task_id, None) is not None
        self._refresh_status()
        return found

    def get_async_task_info(self) -> dict[str, Any]:
        """``{"active_count", "running_jobs": [{"name", "duration"}]}`` of registered work."""
        now = time.time()
        with self._task_lock:
            jobs = [
                {"name": t["name"], "duration": now - t["start_time"]}
                for t in self._async_tasks.values()
            ]
        return {"active_count": len(jobs), "running_jobs": jobs}

    def async_task(
        self, func: Callable[_P, Coroutine[Any, Any, _T]]
    ) -> Callable[_P, Coroutine[Any, Any, _T]]:
        """Decorate an async function so the app reports Busy while it runs."""
        if not inspect.iscoroutinefunction(func):
            raise ValueError("@async_task can only be applied to async functions")

        async def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _T:
            task_id = self.add_async_task(func.__name__)
            try:
                return await func(*args, **kwargs)
            finally:
                self.complete_async_task(task_id)

        wrapper.__name__ = func.__name__
        return wrapper
