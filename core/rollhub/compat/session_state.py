"""The per-rollout state dict agentcore-rl-toolkit's sessions record their progress in.

Upstream sessions take a ``session_state`` (its ``PersistentDict``, backed by DynamoDB or
by nothing) and write coordinates and timings into it with ``await state.set(...)`` and
``await state.update(...)``. rollhub's compat sessions accept that object or this
in-memory one; its persister, when given, is called with a snapshot after each change.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Protocol

__all__ = ["NullPersister", "PersistentDict", "Persister", "SessionState"]


class SessionState(Protocol):
    """What a compat session writes its progress to: a :class:`PersistentDict` or
    upstream's (DynamoDB-backed) one."""

    async def set(self, key: str, value: object) -> None:
        """Set one key."""
        ...

    async def update(self, other: Mapping[str, object], /) -> None:
        """Set several keys."""
        ...


class Persister(Protocol):
    """Where a :class:`PersistentDict` writes its snapshots."""

    async def persist(self, data: Mapping[str, object]) -> None:
        """Store ``data`` (the whole dict)."""
        ...


class NullPersister:
    """Keeps nothing: the dict lives in memory only."""

    async def persist(self, data: Mapping[str, object]) -> None:
        """Do nothing."""


class PersistentDict(Mapping[str, object]):
    """A dict whose writes are async and persisted by ``persister``."""

    def __init__(
        self, data: Mapping[str, object] | None = None, *, persister: Persister | None = None
    ) -> None:
        self._data: dict[str, object] = dict(data or {})
        self._persister = persister or NullPersister()

    def __getitem__(self, key: str) -> object:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def snapshot(self) -> dict[str, object]:
        """A copy of the current contents."""
        return dict(self._data)

    async def set(self, key: str, value: object) -> None:
        """Set one key and persist."""
        self._data[key] = value
        await self._persister.persist(self.snapshot())

    async def update(self, other: Mapping[str, object] | None = None, **kwargs: object) -> None:
        """Set several keys and persist once."""
        self._data.update(other or {}, **kwargs)
        await self._persister.persist(self.snapshot())
