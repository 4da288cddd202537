"""Stale temporary files of the stores an app opens, removed off the event loop.

A store is swept once per root, one store at a time in one background thread: payloads
name stores, so a stream of distinct ``result_store`` URLs must not start a thread each.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable

from rollhub.stores.base import ResultStore

__all__ = ["TempSweeper"]

log = logging.getLogger(__name__)


class TempSweeper:
    """Runs each new store's ``clean_temp`` (when it has one) in a single daemon thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: set[str] = set()
        self._pending: collections.deque[tuple[str, Callable[[], object]]] = collections.deque()
        self._thread: threading.Thread | None = None

    def submit(self, store: ResultStore) -> None:
        """Queue ``store`` for a sweep unless its root was queued before."""
        clean = getattr(store, "clean_temp", None)
        if not callable(clean):
            return
        with self._lock:
            if store.url in self._seen:
                return
            self._seen.add(store.url)
            self._pending.append((store.url, clean))
            if self._thread is None:
                # Daemon: a sweep of a large tree must not hold up the process's exit.
                self._thread = threading.Thread(
                    target=self._drain, name="rollhub-clean-temp", daemon=True
                )
                self._thread.start()

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._pending:
                    self._thread = None
                    return
                url, clean = self._pending.popleft()
            try:
                clean()
            except Exception:  # a sweep is housekeeping: the app goes on without it
                log.warning("sweeping stale temporary files of %s failed", url, exc_info=True)
