"""The hub's session path: one episode run as a session instead of a fire-and-forget call.

:class:`SessionEpisodes` is what :class:`~rollhub.hub.AsyncHub` uses when its runtime
offers sessions: the ``[sessions]`` bounds shared by every episode, group priority, and
the retry of sessions that failed for infrastructure reasons. The outcome fills the
episode, with every phase's seconds under ``episode.metrics["session"]``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from rollhub.config import RollhubConfig
from rollhub.episode import Episode
from rollhub.rollout import RolloutRequest
from rollhub.sessions.base import SessionRuntime
from rollhub.sessions.bounds import GroupPriority, SessionBounds
from rollhub.sessions.lifecycle import SessionOutcome, run_with_attempts

__all__ = ["SESSION_METRICS_KEY", "SessionEpisodes"]

#: where an episode's session timings live: ``episode.metrics["session"]``
SESSION_METRICS_KEY = "session"


class SessionEpisodes:
    """Runs the hub's episodes through a :class:`SessionRuntime`.

    :param runtime: the runtime whose sessions run the episodes.
    :param config: the hub's config (``[sessions]``, ``[experiment]`` defaults).
    :param on_new_session: called with (old, new) request before a retried session.
    """

    def __init__(
        self,
        runtime: SessionRuntime,
        config: RollhubConfig,
        *,
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
        self._on_new_session = on_new_session

    async def run(self, request: RolloutRequest, episode: Episode) -> RolloutRequest:
        """Run ``request`` as a session and fill ``episode`` from its outcome; returns the
        request of the last attempt (its session id may differ after a retry)."""
        outcome, last = await run_with_attempts(
            self.runtime.open_session,
            request,
            self.bounds,
            priority=self.priority.of(request.rollout.input_id),
            attempts=self._attempts,
            on_new_session=self._on_new_session,
        )
        fill_episode(episode, outcome)
        return last


def fill_episode(episode: Episode, outcome: SessionOutcome) -> None:
    """Copy a session's outcome into its episode (status, result, error, timings)."""
    episode.session_id = outcome.session_id
    episode.status = outcome.status
    episode.error = outcome.error
    episode.result = outcome.dump.result if outcome.dump is not None else None
    episode.finished_at = time.time()
    timings: dict[str, object] = {k: round(v, 6) for k, v in outcome.phases.items()}
    if outcome.shutdown_error is not None:
        timings["shutdown_error"] = outcome.shutdown_error
    if outcome.dump is not None and outcome.dump.metrics:
        timings["agent_metrics"] = dict(outcome.dump.metrics)
    episode.metrics[SESSION_METRICS_KEY] = timings
    if outcome.dead_sessions:
        episode.metrics["dead_sessions"] = [dict(d) for d in outcome.dead_sessions]
