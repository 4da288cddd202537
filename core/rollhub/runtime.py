"""The runtime interface: where agent code runs.

A runtime takes a prepared :class:`~rollhub.rollout.RolloutRequest`, starts it somewhere
(worker processes on this machine, AWS Bedrock AgentCore Runtime, a Ray cluster) and returns
at once: rollouts are fire-and-forget, and their results arrive through the result store.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from rollhub.errors import ConfigError, RollhubError
from rollhub.registry import ComponentContext
from rollhub.rollout import RolloutRequest, SubmitReceipt

__all__ = ["ComponentContext", "Runtime", "RuntimeOptions", "SessionLostCallback", "StoreFailure"]

log = logging.getLogger(__name__)

#: Called by a runtime when it knows a session can never produce a result
#: (its worker died, the service reported it gone): ``callback(session_id, reason)``.
SessionLostCallback = Callable[[str, str], None]


class StoreFailure(str):
    """A lost-session reason meaning: the app finished but could not store the result.

    Runtimes pass it to ``_report_lost`` so the client ends the rollout as ``store_error``
    with this text as the cause, instead of running it again on a new session.
    """

    __slots__ = ()


class RuntimeOptions(BaseModel):
    """Options every runtime accepts; runtimes subclass this for their own."""

    model_config = ConfigDict(extra="forbid")


class Runtime(ABC):
    """Submit → receipt, cancel, liveness. Subclasses set ``name`` and ``Options``.

    Lifecycle: ``await start()`` once, then ``submit``/``cancel``/``finish`` from the same
    event loop, then ``await close()``. ``async with runtime:`` does start and close.
    Liveness: a runtime that learns a session can never write its result (its worker died)
    calls the :meth:`on_session_lost` callbacks; the client then runs that rollout again on
    a new session (``session_attempts``), or ends it ``infra_error`` when none is left
    (after one last look in the store).

    Construction: the core calls ``cls(options, context=context)`` with the validated
    ``Options`` and a :class:`~rollhub.registry.ComponentContext` (``context.base_dir`` is
    what relative paths in the options are relative to). In code, pass the option fields
    as keywords instead of ``options``.
    """

    name: ClassVar[str]
    Options: ClassVar[type[RuntimeOptions]] = RuntimeOptions

    def __init__(
        self,
        options: RuntimeOptions | None = None,
        *,
        context: ComponentContext | None = None,
        base_dir: str | Path | None = None,
        **fields: object,
    ) -> None:
        """:param options: validated options, or pass their fields as keywords instead.
        :param context: what the core tells components (default: the working directory).
        :param base_dir: shorthand for ``context=ComponentContext(base_dir=...)``.
        :raises ConfigError: option fields given as keywords next to ``options``.
        """
        if options is not None and fields:
            raise ConfigError(
                f"{self.name} runtime: got options and keyword fields "
                f"({', '.join(sorted(fields))}); pass one or the other"
            )
        self.options = options if options is not None else self.options_from(fields)
        if context is None:
            context = ComponentContext(base_dir=Path(base_dir) if base_dir else Path.cwd())
        elif base_dir is not None:
            context = dataclasses.replace(context, base_dir=Path(base_dir))
        self.context = context
        self._on_lost: list[SessionLostCallback] = []

    @classmethod
    def options_from(cls, fields: dict[str, Any]) -> RuntimeOptions:
        """Validate option fields given as keywords; errors name the runtime."""
        try:
            return cls.Options(**fields)
        except ValueError as exc:
            raise ConfigError(f"{cls.name} runtime options: {exc}") from exc

    #: Whether agents started by this runtime can reach a callback server bound to
    #: 127.0.0.1 in this process (true for worker processes on this machine).
    loopback_callbacks: bool = False
    #: Set once the runtime can run nothing more (its cluster is gone): the hub then raises
    #: it instead of ending rollouts failed, and the run stops. None while it works.
    failure: RollhubError | None = None

    def on_session_lost(self, callback: SessionLostCallback) -> None:
        """Register ``callback(session_id, reason)`` for sessions that can no longer finish.

        Callbacks run on the event loop the runtime was started on; they must not block.
        Every registered callback sees every lost session, so several clients can share
        one runtime and ignore the ids they do not know.
        """
        self._on_lost.append(callback)

    def remove_session_lost(self, callback: SessionLostCallback) -> None:
        """Unregister a callback added with :meth:`on_session_lost` (no error if absent)."""
        with contextlib.suppress(ValueError):
            self._on_lost.remove(callback)

    def _report_lost(self, session_id: str, reason: str) -> None:
        for cb in list(self._on_lost):
            try:
                cb(session_id, reason)
            except Exception:  # a broken listener must not hide the loss from the others
                log.exception("session-lost callback failed for %s", session_id)

    async def start(self) -> None:  # noqa: B027 - optional lifecycle step
        """Acquire resources (start workers, open clients). Idempotent."""

    @abstractmethod
    async def submit(self, request: RolloutRequest) -> SubmitReceipt:
        """Start one rollout and return at once.

        :raises SubmissionError: ``transient=True`` for throttling and server errors.
        """

    @abstractmethod
    async def cancel(self, session_id: str) -> None:
        """Stop a session's work (best effort; a finished session is not an error)."""

    async def finish(self, session_id: str) -> None:
        """The client holds the session's terminal result: free what the session still holds.

        Default: :meth:`cancel`, because a remote session (an AgentCore microVM) stays
        allocated after its handler returns. Runtimes whose sessions end on their own
        override this with bookkeeping only.
        """
        await self.cancel(session_id)

    async def close(self) -> None:  # noqa: B027 - optional lifecycle step
        """Release everything :meth:`start` acquired. Idempotent."""

    async def __aenter__(self) -> Runtime:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
