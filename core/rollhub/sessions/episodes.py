"""The hub's session path: one episode run as a session instead of a fire-and-forget call.

:meth:`SessionEpisodes.for_hub` is what :class:`~rollhub.hubs.async_hub.AsyncHub` asks when it runs an
episode: None when its runtime does not offer sessions, else the hub's one
``SessionEpisodes``: the ``[sessions]`` bounds shared by every episode, group priority, the
prepare hooks, and the retry of sessions that failed for infrastructure reasons. A session
ends in the same :class:`~rollhub.submission.future.RolloutOutcome` the client's path ends in,
and every phase's seconds go to ``episode.metrics["session"]``.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from pluggy import HookRelay

from rollhub.config import RollhubConfig
from rollhub.episode import Episode
from rollhub.plugin_host.hook_calls import call_all
from rollhub.rollout import RolloutRequest
from rollhub.runtime import Runtime
from rollhub.sessions.base import SessionRuntime
from rollhub.sessions.bounds import GroupPriority, SessionBounds
from rollhub.sessions.lifecycle import SessionOutcome, run_with_attempts
from rollhub.submission.future import RolloutOutcome

__all__ = ["SESSION_METRICS_KEY", "SessionEpisodes", "SessionHub"]


class SessionHub(Protocol):
    """What :meth:`SessionEpisodes.for_hub` uses of a started hub
    (:class:`~rollhub.hubs.async_hub.AsyncHub` is one)."""

    @property
    def runtime(self) -> Runtime: ...

    @property
    def config(self) -> RollhubConfig: ...

    @property
    def hook(self) -> HookRelay: ...

    async def _new_capture(self, old: RolloutRequest, new: RolloutRequest) -> None:
        """Open the capture session of a rollout's next runtime session."""
        ...

#: where an episode's session timings live: ``episode.metrics["session"]``
SESSION_METRICS_KEY = "session"

#: hub -> its session path (None: its runtime has no sessions); dies with the hub
_BY_HUB: weakref.WeakKeyDictionary[SessionHub, SessionEpisodes | None] = (
    weakref.WeakKeyDictionary()
)


class SessionEpisodes:
    """Runs a hub's episodes through a :class:`SessionRuntime`.

    :param runtime: the runtime whose sessions run the episodes.
    :param config: the hub's config (``[sessions]``, ``[experiment]`` defaults).
    :param prepare: ``await prepare(request)`` once per rollout, before its first session
        (the hub's ``rollhub_prepare_rollout`` hooks).
    :param on_new_session: called with (old, new) request before a retried session.
    """

    def __init__(
        self,
        runtime: SessionRuntime,
        config: RollhubConfig,
        *,
        prepare: Callable[[RolloutRequest], Awaitable[Any]] | None = None,
        on_new_session: Callable[[RolloutRequest, RolloutRequest], Awaitable[None]] | None = None,
    ) -> None:
        self.runtime = runtime
        self.bounds = SessionBounds.from_config(
            config.sessions,
            concurrency=config.experiment.concurrency,
            timeout_s=config.experiment.timeout_s,
        )
        self.priority = GroupPriority()
        self._attempts = config.experiment.session_attempts
        self._prepare = prepare
        self._on_new_session = on_new_session

    @classmethod
    def for_hub(cls, hub: SessionHub) -> SessionEpisodes | None:
        """The session path of a started hub (made on first use), None when its runtime
        does not run rollouts as sessions."""
        try:
            return _BY_HUB[hub]
        except KeyError:
            pass
        runtime = hub.runtime
        made = None
        if isinstance(runtime, SessionRuntime):

            async def prepare(request: RolloutRequest) -> None:
                await call_all(hub.hook.rollhub_prepare_rollout, request=request, hub=hub)

            made = cls(runtime, hub.config, prepare=prepare, on_new_session=hub._new_capture)
        _BY_HUB[hub] = made
        return made

    async def run(self, request: RolloutRequest, episode: Episode) -> RolloutOutcome:
        """Run ``request`` as a session (retried in a new one after an infrastructure
        fault); its phase seconds go into ``episode.metrics``."""
        submitted = time.time()
        if self._prepare is not None:
            await self._prepare(request)
        outcome, last = await run_with_attempts(
            self.runtime.open_session,
            request,
            self.bounds,
            priority=self.priority.of(request.rollout.input_id),
            attempts=self._attempts,
            on_new_session=self._on_new_session,
        )
        episode.metrics[SESSION_METRICS_KEY] = session_metrics(outcome)
        rollout = last.rollout
        result = outcome.dump.result if outcome.dump is not None else None
        if result is not None and outcome.dump is not None and outcome.dump.reward is not None:
            # a reward reported beside the result (an executor's dump) is where hooks read it
            result = {"rewards": outcome.dump.reward, **result}
        return RolloutOutcome(
            session_id=outcome.session_id,
            exp_id=rollout.exp_id,
            input_id=rollout.input_id,
            result_key=rollout.result_key,
            status=outcome.status,
            result=result,
            error=outcome.error,
            submitted_at=submitted,
            finished_at=time.time(),
            attempts=len(outcome.dead_sessions) + 1,
            dead_sessions=tuple(outcome.dead_sessions),
        )


def session_metrics(outcome: SessionOutcome) -> dict[str, Any]:
    """What an episode records of its session: phase seconds, the teardown's failure, the
    agent's numeric metrics."""
    timings: dict[str, Any] = {k: round(v, 6) for k, v in outcome.phases.items()}
    if outcome.shutdown_error is not None:
        timings["shutdown_error"] = outcome.shutdown_error
    if outcome.dump is not None and outcome.dump.metrics:
        timings["agent_metrics"] = dict(outcome.dump.metrics)
    return timings
