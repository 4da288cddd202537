"""Durable sessions: every committed turn is appended to a SQLite journal (WAL mode)
before the gateway answers, so a restarted gateway resumes every open session.

One row per turn holds what the trajectory needs to rebuild the turn exactly, without
re-rendering: the ids, logprobs and the template-form messages the turn added. Finishing
a session marks it done; discarding deletes its rows. ``synchronous=NORMAL`` in WAL mode
survives a killed process (the case a gateway restart is about); ``durable="full"`` also
survives power loss at a higher cost per turn.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Literal

from rollhub.errors import GatewayError

log = logging.getLogger(__name__)

__all__ = ["SessionJournal"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    model_id   TEXT,
    state      TEXT NOT NULL DEFAULT 'open',
    created    REAL NOT NULL,
    updated    REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS turns (
    session_id TEXT NOT NULL,
    turn       INTEGER NOT NULL,
    entry      TEXT NOT NULL,
    PRIMARY KEY (session_id, turn)
);
"""


class SessionJournal:
    """An append-only journal of committed turns.

    :param path: the SQLite file (created with its folder when missing).
    :param durable: ``"normal"`` (survives process crashes) or ``"full"`` (fsync per turn).
    """

    def __init__(self, path: str | Path, *, durable: Literal["normal", "full"] = "normal") -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={'FULL' if durable == 'full' else 'NORMAL'}")
            self._db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise GatewayError(
                f"cannot open the session journal {str(self.path)!r}: {exc}", field="journal"
            ) from exc
        self._lock = threading.Lock()

    def _run(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        try:
            with self._lock:
                return self._db.execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise GatewayError(
                f"session journal {str(self.path)!r}: {exc}", field="journal"
            ) from exc

    def open_session(self, session_id: str, model_id: str | None = None) -> None:
        """Register a session (idempotent)."""
        now = time.time()
        self._run(
            "INSERT OR IGNORE INTO sessions (session_id, model_id, created, updated) VALUES (?,?,?,?)",
            (session_id, model_id, now, now),
        )

    def append(self, session_id: str, turn: int, entry: dict[str, Any]) -> None:
        """Write one committed turn; returns once SQLite has it in the WAL."""
        text = json.dumps(entry, separators=(",", ":"), ensure_ascii=False)
        now = time.time()
        try:
            with self._lock:
                self._db.execute("BEGIN")
                self._db.execute(
                    "INSERT OR IGNORE INTO sessions (session_id, created, updated) VALUES (?,?,?)",
                    (session_id, now, now),
                )
                self._db.execute(
                    "INSERT OR REPLACE INTO turns (session_id, turn, entry) VALUES (?,?,?)",
                    (session_id, turn, text),
                )
                self._db.execute(
                    "UPDATE sessions SET updated=? WHERE session_id=?", (now, session_id)
                )
                self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            with self._lock:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
            raise GatewayError(
                f"session journal {str(self.path)!r}: {exc}", field="journal"
            ) from exc

    def turns(self, session_id: str) -> list[dict[str, Any]]:
        """The session's entries in turn order (empty for unknown or discarded sessions)."""
        rows = self._run("SELECT entry FROM turns WHERE session_id=? ORDER BY turn", (session_id,))
        return [json.loads(r[0]) for r in rows]

    def state(self, session_id: str) -> str | None:
        """``"open"``, ``"done"`` or ``None`` for an unknown session."""
        rows = self._run("SELECT state FROM sessions WHERE session_id=?", (session_id,))
        return rows[0][0] if rows else None

    def open_sessions(self) -> list[str]:
        """Sessions not yet finished, oldest first."""
        rows = self._run("SELECT session_id FROM sessions WHERE state='open' ORDER BY created")
        return [r[0] for r in rows]

    def finish(self, session_id: str) -> None:
        """Mark a session done (its turns stay readable)."""
        self._run(
            "UPDATE sessions SET state='done', updated=? WHERE session_id=?",
            (time.time(), session_id),
        )

    def discard(self, session_id: str) -> None:
        """Delete a session and its turns."""
        self._run("DELETE FROM turns WHERE session_id=?", (session_id,))
        self._run("DELETE FROM sessions WHERE session_id=?", (session_id,))

    def close(self) -> None:
        """Close the database (idempotent)."""
        with self._lock:
            self._db.close()
