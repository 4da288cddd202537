"""Capture sessions: who may call the model, under which policy, and where turns go.

The hub opens a session (``POST /sessions`` with the admin token, or
:meth:`SessionManager.open` in process) and receives a random session key. The agent
presents that key in the api-key slot of its SDK; every call it makes is recorded in the
session's :class:`~rollhub_gateway.turns.Conversation`. There are no implicit sessions: an
unknown, finished, dropped or expired key is refused.

Idle sessions (no call for ``session_ttl_s``) are dropped by a background reaper, so a
rollout that died without closing its session does not hold memory forever.

With a journal, keys survive a restart: each key is journaled (as a digest) with its
session's policy, and an unfinished journal session is reopened on first use, by its
agent's old key or by the hub reading its traces, so agents carry on without noticing. A
session whose journal rows cannot rebuild it exactly is refused (reason ``unrecoverable``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from rollhub.errors import CaptureLost, ConfigError, GatewayError, TokenRetrievalError
from rollhub.rollout import validate_key_part
from rollhub.trace import TraceRecord

from rollhub_gateway.config import SessionPolicy
from rollhub_gateway.journal import JournalCorruptError, SessionJournal
from rollhub_gateway.turns import ChatModel, Conversation

__all__ = [
    "ENGINE_FAILED",
    "KEY_PREFIX",
    "Session",
    "SessionError",
    "SessionManager",
    "retrieval_error",
]

log = logging.getLogger(__name__)

#: the ``reason`` of a :class:`SessionError` for a session the engine failed under
ENGINE_FAILED = "engine_failed"

KEY_PREFIX = "rh-"


class SessionError(GatewayError):
    """A session is unknown, closed, exists already, has a bad id, or its journal rows
    cannot rebuild it.

    ``reason``: unknown|closed|exists|invalid|unrecoverable.
    """

    def __init__(self, message: str = "", *, reason: str = "unknown", **context: object) -> None:
        super().__init__(message, reason=reason, **context)


@dataclass(eq=False)
class Session:
    """One open capture session."""

    session_id: str
    key: str
    policy: SessionPolicy
    conversation: Conversation
    created: float = field(default_factory=time.monotonic)
    #: when a call of the session last started or ended (its idle timer)
    last_used: float = field(default_factory=time.monotonic)
    turns: int = 0
    in_flight: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)
    #: older keys of the session still accepted (journaled keys after a restart)
    aliases: list[str] = field(default_factory=list)
    #: held while one of its calls is prepared: calls are rendered in arrival order
    prepare_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: ``(route's adapter name, WireRequest.known)`` of the last call: the next call on
    #: that route takes its unchanged messages from it instead of parsing them again
    last_parse: tuple[str, Any] | None = None
    #: the first engine failure under one of its calls: the agent saw an error the
    #: infrastructure caused, so reading or closing the session reports the capture lost
    engine_failure: str | None = None


class SessionManager:
    """Open sessions by id and by key; finishing, dropping and idle expiry.

    :param chat_model: builds each session's conversation.
    :param default_policy: the policy of sessions opened without one.
    :param ttl_s: idle seconds after which the reaper drops a session.
    :param on_close: called with ``(session, how)`` when a session ends
        (``finished``, ``dropped``, ``expired``).
    """

    def __init__(
        self,
        chat_model: ChatModel,
        *,
        default_policy: SessionPolicy | None = None,
        ttl_s: float = 3600.0,
        reap_interval_s: float | None = None,
        on_close: Callable[[Session, str], None] | None = None,
    ) -> None:
        self.chat_model = chat_model
        self.default_policy = default_policy or SessionPolicy()
        self.ttl_s = ttl_s
        self.reap_interval_s = reap_interval_s or max(0.05, min(ttl_s / 4, 60.0))
        self.on_close = on_close
        self._by_id: dict[str, Session] = {}
        self._by_key: dict[str, Session] = {}
        #: api keys of sessions this gateway never held but was told are gone, with why
        self._lost: dict[str, str] = {}
        self._reaper: asyncio.Task[None] | None = None
        #: drift counts of sessions that already ended (so metrics only grow)
        self.closed_drift: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._by_id)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._by_id

    # Opening and lookup ---------------------------------------------------------------------

    def open(
        self,
        session_id: str | None = None,
        *,
        policy: SessionPolicy | dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
        key: str | None = None,
    ) -> Session:
        """Open a session and return it (its ``key`` goes to the agent).

        :param policy: a full policy, or a dict of fields that override the default policy.
        :param key: the key to serve it under (a journaled key after a restart); new if None.
        :raises SessionError: ``session_id`` is already open (reason ``exists``), or is
            not a valid key part (reason ``invalid``): session ids name journal rows and
            result keys, so they follow the stores' rule.
        """
        if session_id is not None:
            try:
                validate_key_part(session_id, "session_id")
            except ValueError:
                shown = session_id[:60] + ("…" if len(session_id) > 60 else "")
                raise SessionError(
                    f"session_id {shown!r} is not a valid key part: use 1-200 characters of "
                    "letters, digits and . _ : = @ + - (not starting with a symbol, no '..', "
                    "no '/')",
                    reason="invalid",
                    field="session_id",
                ) from None
        sid = session_id or secrets.token_hex(8)
        if sid in self._by_id:
            raise SessionError(f"session {sid!r} is already open", reason="exists", session_id=sid)
        if isinstance(policy, dict):
            policy = self.merge_policy(policy)
        key = key or KEY_PREFIX + secrets.token_urlsafe(24)
        try:
            conversation = self.chat_model.new_conversation(sid)
        except JournalCorruptError as exc:
            raise SessionError(
                str(exc), reason="unrecoverable", session_id=sid, kind=exc.context.get("kind")
            ) from exc
        session = Session(
            sid, key, policy or self.default_policy, conversation, metadata=metadata or {}
        )
        journal = self._journal()
        if journal is not None:
            journal.bind(sid, key, session.policy.model_dump(mode="json"))
        self._by_id[sid] = session
        self._by_key[key] = session
        log.debug("opened session %s", sid)
        return session

    def merge_policy(self, overrides: dict[str, Any]) -> SessionPolicy:
        """The default policy with ``overrides`` applied.

        :raises ConfigError: an unknown policy field or a bad value, naming it.
        """
        try:
            return SessionPolicy.model_validate({**self.default_policy.model_dump(), **overrides})
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err["loc"])
            raise ConfigError(f"policy.{loc}: {err['msg']}", field=f"policy.{loc}") from None

    def by_key(self, key: str | None) -> Session:
        """The open session of an api key; an unfinished journal session is reopened.

        :raises SessionError: no open session has this key (``unknown``), or its journal
            rows cannot rebuild it (``unrecoverable``).
        """
        session = self._by_key.get(key or "")
        if session is None and key and key.startswith(KEY_PREFIX):
            session = self._reopen_by_key(key)
        if session is None:
            why = self._lost.get(key or "")
            if why is not None:
                raise SessionError(why, reason="lost")
            raise SessionError("invalid api key: no open session has this key", reason="unknown")
        return session

    def mark_lost(self, key: str, why: str) -> None:
        """Answer calls with ``key``, whose session this gateway does not hold (it was on
        a process of this replica that died), with why the session is gone."""
        self._lost[key] = why

    def get(self, session_id: str) -> Session:
        """The open session with this id; an unfinished journal session is reopened.

        :raises SessionError: no such session (``unknown``), or its journal rows cannot
            rebuild it (``unrecoverable``).
        """
        session = self._by_id.get(session_id)
        if session is None:
            journal = self._journal()
            if journal is not None and journal.state(session_id) in ("open", "damaged"):
                log.info("session %s: reopened from the journal", session_id)
                return self.open(session_id, policy=journal.policy(session_id))
            raise SessionError(
                f"no open session {session_id!r}", reason="unknown", session_id=session_id
            )
        return session

    def _journal(self) -> SessionJournal | None:
        return getattr(self.chat_model, "journal", None)

    def _reopen_by_key(self, key: str) -> Session | None:
        """The session a journaled key belongs to, reopened if it is not open yet."""
        journal = self._journal()
        found = journal.session_for_key(key) if journal is not None else None
        if found is None:
            return None
        sid, policy = found
        session = self._by_id.get(sid)
        if session is None:
            log.info("session %s: reopened from the journal by its agent's key", sid)
            return self.open(sid, policy=policy, key=key)
        # the hub reopened it under a new key: the agent's old one works too
        self._by_key[key] = session
        session.aliases.append(key)
        return session

    def sessions(self) -> list[Session]:
        """Every open session."""
        return list(self._by_id.values())

    # Ending ---------------------------------------------------------------------------------

    def traces(self, session_id: str) -> list[TraceRecord]:
        """The records of an open session so far (complete for every returned call).

        :raises SessionError: (reason ``engine_failed``) the engine failed under one of
            its calls.
        """
        session = self.get(session_id)
        _raise_engine_failure(session)
        return session.conversation.traces()

    def finish(self, session_id: str) -> list[TraceRecord]:
        """Close a session and return its records; its key stops working.

        :raises SessionError: (reason ``engine_failed``, the session closed all the same)
            the engine failed under one of its calls.
        """
        session = self._remove(session_id)
        if session.engine_failure is not None:
            self._discard(session)
            _raise_engine_failure(session)
        finish = getattr(session.conversation, "finish", None)
        # finish() returns the records: building them a second time is the costliest part
        records = finish() if callable(finish) else session.conversation.traces()
        self._closed(session, "finished")
        return records

    def drop(self, session_id: str, *, how: str = "dropped") -> None:
        """Close a session and discard its records (also a journal session that cannot be
        recovered: its id can then start afresh).

        :raises SessionError: (reason ``engine_failed``, the session dropped all the same)
            the engine failed under one of its calls.
        """
        journal = self._journal()
        if session_id not in self._by_id and journal is not None:
            try:
                self.get(session_id)  # a journal session is reopened to be closed
            except SessionError as exc:
                if exc.context.get("reason") != "unrecoverable":
                    raise
                journal.discard(session_id)
                return
        session = self._remove(session_id)
        self._discard(session, how)
        _raise_engine_failure(session)

    def _discard(self, session: Session, how: str = "dropped") -> None:
        """Discard the records of a session already taken out of the manager."""
        discard = getattr(session.conversation, "discard", None)
        if callable(discard):
            discard()
        self._closed(session, how)

    def drift_totals(self) -> dict[str, int]:
        """Drift counts of every session, ended or open."""
        totals = dict(self.closed_drift)
        for s in self._by_id.values():
            for k, v in s.conversation.drift_counts().items():
                totals[k] = totals.get(k, 0) + v
        return totals

    def _remove(self, session_id: str) -> Session:
        session = self._by_id.pop(session_id, None)
        if session is None:
            journal = self._journal()
            if journal is not None and journal.state(session_id) in ("open", "damaged"):
                self.get(session_id)  # reopen it from the journal to close it like any other
                return self._remove(session_id)
            raise SessionError(
                f"no open session {session_id!r}", reason="unknown", session_id=session_id
            )
        for alias in session.aliases:
            self._by_key.pop(alias, None)
        self._by_key.pop(session.key, None)
        return session

    def _closed(self, session: Session, how: str) -> None:
        for k, v in session.conversation.drift_counts().items():
            self.closed_drift[k] = self.closed_drift.get(k, 0) + v
        log.debug("session %s %s after %d turns", session.session_id, how, session.turns)
        if self.on_close is not None:
            self.on_close(session, how)

    # Idle expiry ----------------------------------------------------------------------------

    def reap(self, now: float | None = None) -> list[str]:
        """Drop sessions idle for longer than the TTL (never one with a call in flight)."""
        now = time.monotonic() if now is None else now
        expired = [
            s.session_id
            for s in self._by_id.values()
            if s.in_flight == 0 and now - s.last_used > self.ttl_s
        ]
        for sid in expired:
            log.warning(
                "session %s expired after %.0f s idle; its turns are discarded", sid, self.ttl_s
            )
            self._discard(self._remove(sid), "expired")  # nobody reads an expiry's outcome
        return expired

    def start_reaper(self) -> None:
        """Start the background reaper on the running loop (idempotent)."""
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.get_running_loop().create_task(self._reap_forever())

    async def stop_reaper(self) -> None:
        """Stop the background reaper."""
        task, self._reaper = self._reaper, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _reap_forever(self) -> None:
        while True:
            await asyncio.sleep(self.reap_interval_s)
            try:
                self.reap()
            except Exception:  # a failing discard must not stop expiry of the others
                log.exception("session reaper failed")


def _raise_engine_failure(session: Session) -> None:
    if session.engine_failure is not None:
        raise SessionError(
            f"session {session.session_id!r}: the engine failed under one of its calls "
            f"({session.engine_failure}); its agent's outcome is the engine's, not its own",
            reason=ENGINE_FAILED,
            session_id=session.session_id,
        )


def retrieval_error(exc: GatewayError, session_id: str) -> TokenRetrievalError:
    """What a token source raises for ``exc`` on reading or closing ``session_id``: a
    session the engine failed under is lost to the infrastructure (:class:`CaptureLost`:
    the hub runs its rollout again, or ends it ``infra_error``), any other a plain one."""
    lost = exc.context.get("reason") == ENGINE_FAILED
    return (CaptureLost if lost else TokenRetrievalError)(str(exc), session_id=session_id)
