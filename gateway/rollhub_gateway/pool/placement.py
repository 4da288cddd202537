"""Where a new capture session goes: the live replica with the fewest live sessions.

Ties go to the replica that has been given the fewest sessions so far, then to the lowest
index, so a burst of opens on an idle pool deals sessions out round-robin instead of
piling them on replica 0.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from typing import Protocol, TypeVar

from rollhub.errors import GatewayError

__all__ = ["Placeable", "least_loaded"]

log = logging.getLogger(__name__)

R = TypeVar("R", bound="Placeable")


class Placeable(Protocol):
    """What placement reads from a replica (read-only: any attribute of these types fits,
    e.g. a ``dict`` of live sessions)."""

    @property
    def index(self) -> int: ...

    @property
    def live(self) -> Collection[str]:
        """Ids of the sessions open on it (opened and not yet finished or dropped)."""
        ...

    @property
    def opened(self) -> int:
        """Sessions it has been given since it started."""
        ...

    @property
    def dead(self) -> str | None:
        """Why it died, or None while it serves."""
        ...

    @property
    def restarting(self) -> bool:
        """Being started again after it died (placed on only when no other replica serves)."""
        ...

    @property
    def draining(self) -> bool:
        """Finishing its sessions before it moves to another node (placed on likewise)."""
        ...


def least_loaded(replicas: Sequence[R], *, exclude: frozenset[int] = frozenset()) -> R:
    """The live replica (not in ``exclude``) with the fewest live sessions.

    :raises GatewayError: no replica is left to take a session (each one's cause listed).
    """
    candidates = [r for r in replicas if r.dead is None and r.index not in exclude]
    candidates = [r for r in candidates if not (r.restarting or r.draining)] or candidates
    if not candidates:
        causes = "; ".join(
            f"replica {r.index}: {r.dead or 'refused the session'}" for r in replicas
        )
        raise GatewayError(
            f"no gateway replica can take a session ({causes}); restart the token source",
            replicas=len(replicas),
        )
    return min(candidates, key=lambda r: (len(r.live), r.opened, r.index))
