"""Rollout sessions: setup → run → shutdown, bounded apart (see :mod:`rollhub.sessions.base`).

- :class:`RolloutSession`, :class:`SessionDump`, :class:`SessionRuntime`: the contract
  (:mod:`rollhub.sessions.base`)
- :class:`SessionsConfig`: the ``[sessions]`` table (:mod:`rollhub.sessions.config`)
- :class:`SessionBounds`, :class:`PrioritySlots`, :class:`GroupPriority`: the shared limits
  (:mod:`rollhub.sessions.bounds`)
- :func:`drive_session`, :class:`SessionOutcome`: one session's lifecycle
  (:mod:`rollhub.sessions.lifecycle`); :class:`SessionEpisodes`: the hub's use of it
  (:mod:`rollhub.sessions.episodes`)
"""

from __future__ import annotations

from rollhub.sessions.base import RolloutSession, SessionDump, SessionRuntime
from rollhub.sessions.bounds import GroupPriority, PrioritySlots, SessionBounds
from rollhub.sessions.config import SessionsConfig
from rollhub.sessions.lifecycle import SessionOutcome, drive_session, run_with_attempts

__all__ = [
    "GroupPriority",
    "PrioritySlots",
    "RolloutSession",
    "SessionBounds",
    "SessionDump",
    "SessionOutcome",
    "SessionRuntime",
    "SessionsConfig",
    "drive_session",
    "run_with_attempts",
]
