"""Durable sessions: every committed turn is appended to a SQLite journal (WAL mode)
before the gateway answers, so a restarted gateway resumes every open session.

One row per turn holds what the trajectory needs to rebuild the turn exactly, without
re-rendering: the ids, logprobs and the template-form messages the turn added. Finishing
a session marks it done; discarding deletes its rows. ``synchronous=NORMAL`` in WAL mode
survives a killed process (the case a gateway restart is about); ``durable="full"`` also
survives power loss at a higher cost per turn.

Damage is detected, never served: each row carries the CRC-32 of its own entry (the cost
is that of the new turn, not of the history), a row that fails it or lacks a field raises
:class:`JournalCorruptError`, and a write-ahead log whose size is not a whole number of
frames (cut or overwritten from outside: committed turns may be missing) makes every
session that was open in it unrecoverable. Session keys are kept as SHA-256 digests with
their session's policy, so an agent's key keeps working after a restart.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import sqlite3
import threading
import time
import zlib
from array import array
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from rollhub.errors import GatewayError

log = logging.getLogger(__name__)

__all__ = ["ENTRY_FIELDS", "JournalCorruptError", "SessionJournal", "key_digest"]

#: the fields every turn entry must have to rebuild its turn exactly
ENTRY_FIELDS = frozenset(
    {
        "turn", "parent", "base", "extra_ids", "output_ids", "logprobs", "finish_reason",
        "weight_version", "drift", "ill_formed", "masked", "new_messages", "history_digest",
        "prompt_text_len", "prompt_text_digest", "tools_key",
    }
)  # fmt: skip


class JournalCorruptError(GatewayError):
    """A session's journal rows cannot rebuild it exactly.

    Context: ``session_id``, ``turn`` (None for the whole log), ``kind`` (``checksum``,
    ``unreadable``, ``missing_field``, ``torn_wal``).
    """


def key_digest(key: str) -> str:
    """The digest a session key is stored under (the key itself never is)."""
    return hashlib.sha256(key.encode()).hexdigest()


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
CREATE TABLE IF NOT EXISTS session_keys (
    digest     TEXT PRIMARY KEY,
    session_id TEXT NOT NULL
);
"""

#: columns added after the first schema: (table, column, type)
_ADDED = (("turns", "crc", "INTEGER"), ("sessions", "policy", "TEXT"))


def _torn_wal(path: Path) -> bool:
    """Whether ``path``'s write-ahead log ends inside a frame: SQLite writes whole frames,
    so such a log was cut or overwritten from outside and its last commits are lost."""
    wal = path.with_name(path.name + "-wal")
    try:
        size = wal.stat().st_size
        if size == 0:
            return False
        with wal.open("rb") as f:
            header = f.read(32)
    except OSError:
        return False
    if len(header) < 32:
        return True
    page = int.from_bytes(header[8:12], "big")
    if page < 512 or page & (page - 1):
        return True
    return (size - 32) % (24 + page) != 0


class SessionJournal:
    """An append-only journal of committed turns.

    :param path: the SQLite file (created with its folder when missing).
    :param durable: ``"normal"`` (survives process crashes) or ``"full"`` (fsync per turn).
    """

    def __init__(self, path: str | Path, *, durable: Literal["normal", "full"] = "normal") -> None:
        self.path = Path(path)
        #: damage found so far, by kind (``/metrics``)
        self.corruptions: Counter[str] = Counter()
        self._reported: set[tuple[str, str]] = set()
        torn = _torn_wal(self.path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={'FULL' if durable == 'full' else 'NORMAL'}")
            self._db.executescript(_SCHEMA)
            for table, column, kind in _ADDED:
                have = {r[1] for r in self._db.execute(f"PRAGMA table_info({table})")}
                if column not in have:
                    self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
        except (OSError, sqlite3.Error) as exc:
            raise GatewayError(
                f"cannot open the session journal {str(self.path)!r}: {exc}", field="journal"
            ) from exc
        self._lock = threading.Lock()
        #: sessions open when the log was found torn: their last turns may be lost
        self._torn: set[str] = {
            r[0] for r in self._run("SELECT session_id FROM sessions WHERE state='damaged'")
        }
        if torn:
            fresh = set(self.open_sessions())
            # kept in the file: SQLite rewrites the log, and a later open must still refuse
            self._run("UPDATE sessions SET state='damaged' WHERE state='open'")
            self._torn |= fresh
            log.error(
                "session journal %s: the write-ahead log was cut; %d open sessions cannot be "
                "recovered exactly and will be refused",
                self.path,
                len(fresh),
            )
            for sid in fresh:
                self._reported.add((sid, "torn_wal"))
                self.corruptions["torn_wal"] += 1

    def _run(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        try:
            with self._lock:
                return self._db.execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise self._error(exc) from exc

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """Statements that land together or not at all (rolled back on any SQLite error)."""
        try:
            with self._lock:
                self._db.execute("BEGIN")
                yield self._db
                self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            with self._lock:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
            raise self._error(exc) from exc

    def _error(self, exc: sqlite3.Error) -> GatewayError:
        return GatewayError(f"session journal {str(self.path)!r}: {exc}", field="journal")

    def open_session(self, session_id: str, model_id: str | None = None) -> None:
        """Register a session (idempotent)."""
        now = time.time()
        self._run(
            "INSERT OR IGNORE INTO sessions (session_id, model_id, created, updated) VALUES (?,?,?,?)",
            (session_id, model_id, now, now),
        )

    def append(self, session_id: str, turn: int, entry: dict[str, Any]) -> None:
        """Write one committed turn; returns once SQLite has it in the WAL."""
        text = json.dumps(entry, separators=(",", ":"), ensure_ascii=False, default=_plain)
        crc = zlib.crc32(text.encode())
        now = time.time()
        with self._transaction() as db:
            db.execute(
                "INSERT OR IGNORE INTO sessions (session_id, created, updated) VALUES (?,?,?)",
                (session_id, now, now),
            )
            db.execute(
                "INSERT OR REPLACE INTO turns (session_id, turn, entry, crc) VALUES (?,?,?,?)",
                (session_id, turn, text, crc),
            )
            db.execute("UPDATE sessions SET updated=? WHERE session_id=?", (now, session_id))

    def turns(self, session_id: str) -> list[dict[str, Any]]:
        """The session's entries in turn order (empty for unknown or discarded sessions).

        :raises JournalCorruptError: a row fails its checksum, is not JSON or lacks a field,
            or the session was open in a write-ahead log that was cut.
        """
        if session_id in self._torn:
            self.damaged(session_id, None, "torn_wal", "the journal's write-ahead log was cut")
        rows = self._run(
            "SELECT turn, entry, crc FROM turns WHERE session_id=? ORDER BY turn", (session_id,)
        )
        out = []
        for turn, text, crc in rows:
            if crc is not None and zlib.crc32(str(text).encode()) != crc:
                self.damaged(session_id, turn, "checksum", "its checksum does not match")
            try:
                entry = json.loads(text)
            except (TypeError, ValueError):
                self.damaged(session_id, turn, "unreadable", "it is not JSON")
            missing = ENTRY_FIELDS - set(entry) if isinstance(entry, dict) else ENTRY_FIELDS
            if missing:
                self.damaged(
                    session_id, turn, "missing_field", f"it lacks {', '.join(sorted(missing))}"
                )
            out.append(entry)
        return out

    def damaged(self, session_id: str, turn: int | None, kind: str, why: str) -> None:
        """Count and raise damage found in a session's rows (also by the rebuild).

        :raises JournalCorruptError: always.
        """
        if (session_id, kind) not in self._reported:
            self._reported.add((session_id, kind))
            self.corruptions[kind] += 1
        where = f"turn {turn}" if turn is not None else "the session"
        raise JournalCorruptError(
            f"session {session_id!r} cannot be recovered exactly from the journal "
            f"{str(self.path)!r}: {where} is damaged ({why}); drop the session and run the "
            "rollout again",
            session_id=session_id,
            turn=turn,
            kind=kind,
        )

    # Session keys ------------------------------------------------------------------------

    def bind(self, session_id: str, key: str, policy: dict[str, Any] | None = None) -> None:
        """Remember a session's key (as a digest) and policy, so they survive a restart."""
        with self._transaction() as db:
            db.execute(
                "INSERT OR REPLACE INTO session_keys (digest, session_id) VALUES (?,?)",
                (key_digest(key), session_id),
            )
            if policy is not None:
                db.execute(
                    "UPDATE sessions SET policy=? WHERE session_id=?",
                    (json.dumps(policy), session_id),
                )

    def policy(self, session_id: str) -> dict[str, Any] | None:
        """The policy a session was opened with (None: unknown or not recorded)."""
        rows = self._run("SELECT policy FROM sessions WHERE session_id=?", (session_id,))
        return json.loads(rows[0][0]) if rows and rows[0][0] else None

    def session_for_key(self, key: str) -> tuple[str, dict[str, Any] | None] | None:
        """``(session id, policy)`` of an unfinished session opened with ``key``, else None."""
        rows = self._run(
            "SELECT s.session_id, s.policy FROM session_keys k JOIN sessions s "
            "ON s.session_id = k.session_id WHERE k.digest=? AND s.state='open'",
            (key_digest(key),),
        )
        if not rows:
            return None
        sid, policy = rows[0]
        return sid, (json.loads(policy) if policy else None)

    def state(self, session_id: str) -> str | None:
        """``"open"``, ``"done"``, ``"damaged"`` (in a cut log) or ``None`` (unknown)."""
        rows = self._run("SELECT state FROM sessions WHERE session_id=?", (session_id,))
        return rows[0][0] if rows else None

    def open_sessions(self) -> list[str]:
        """Sessions not yet finished, oldest first."""
        rows = self._run("SELECT session_id FROM sessions WHERE state='open' ORDER BY created")
        return [r[0] for r in rows]

    def finish(self, session_id: str) -> None:
        """Mark a session done (its turns stay readable; its keys stop working)."""
        self._run(
            "UPDATE sessions SET state='done', updated=? WHERE session_id=?",
            (time.time(), session_id),
        )
        self._run("DELETE FROM session_keys WHERE session_id=?", (session_id,))

    def discard(self, session_id: str) -> None:
        """Delete a session, its turns and its keys."""
        self._run("DELETE FROM turns WHERE session_id=?", (session_id,))
        self._run("DELETE FROM session_keys WHERE session_id=?", (session_id,))
        self._run("DELETE FROM sessions WHERE session_id=?", (session_id,))
        self._torn.discard(session_id)

    def close(self) -> None:
        """Close the database (idempotent)."""
        with self._lock:
            self._db.close()


def _plain(value: object) -> list[Any]:
    """Arrays of ids and logprobs as JSON lists (turn nodes keep them compact)."""
    if isinstance(value, array):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")
