"""agentcore-rl-toolkit's addressable invocations: the envelope and the persisted records.

A request carries ``{"_agentcore_runtime": {"version": 1, "operation": "start" | "get",
"invocation_id": ..., "background": bool}}`` beside the application payload; the app
answers the invocation's state ``{"version", "invocation_id", "status", "result" |
"error"}`` with status ``in_progress``, ``completed``, ``interrupted`` (started, but the
process that ran it is gone) or ``not_found``. Records live in files, one directory per
(session, invocation), written atomically, so a restarted process still answers ``get``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = ["ENVELOPE_KEY", "VERSION", "InvocationRequest", "InvocationStore", "state"]

ENVELOPE_KEY = "_agentcore_runtime"
VERSION = 1
Status = Literal["in_progress", "completed", "interrupted", "not_found"]
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")


def state(invocation_id: str, status: Status) -> dict[str, Any]:
    """An invocation state without output."""
    return {"version": VERSION, "invocation_id": invocation_id, "status": status}


@dataclass(frozen=True)
class InvocationRequest:
    """A parsed envelope."""

    operation: Literal["start", "get"]
    invocation_id: str
    background: bool = False

    @classmethod
    def parse(cls, envelope: object) -> InvocationRequest:
        """:raises ValueError: naming the envelope field at fault."""
        if not isinstance(envelope, dict):
            raise ValueError(f"{ENVELOPE_KEY} must be an object")
        unknown = set(envelope) - {"version", "operation", "invocation_id", "background"}
        if unknown:
            raise ValueError(f"Unknown runtime invocation field: {sorted(unknown)}")
        version = envelope.get("version")
        if isinstance(version, bool) or version != VERSION:
            raise ValueError(f"Runtime invocation version must be {VERSION}")
        operation = envelope.get("operation")
        if operation not in ("start", "get"):
            raise ValueError("operation must be 'start' or 'get'")
        invocation_id = envelope.get("invocation_id")
        if not isinstance(invocation_id, str) or not _ID.fullmatch(invocation_id):
            raise ValueError(
                "invocation_id must be 1–128 letters, digits, underscores or hyphens, "
                "starting alphanumeric"
            )
        background = envelope.get("background", False)
        if not isinstance(background, bool):
            raise ValueError("background must be a boolean")
        if operation == "get" and "background" in envelope:
            raise ValueError("background is only valid for start")
        return cls(operation=operation, invocation_id=invocation_id, background=background)


class InvocationStore:
    """Invocation records under ``root`` (default: ``.agentcore_runtime`` in the temp dir)."""

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = (
            Path(root) if root is not None else Path(tempfile.gettempdir()) / ".agentcore_runtime"
        )
        self.root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=self.root):  # fail at start when not writable
            pass

    def _dir(self, session_id: str, invocation_id: str) -> Path:
        # a session header is opaque: never a path component
        return self.root / hashlib.sha256(session_id.encode()).hexdigest() / invocation_id

    def read(self, session_id: str, invocation_id: str) -> dict[str, Any] | None:
        """The record (result first, else the start), None when there is none."""
        folder = self._dir(session_id, invocation_id)
        for name in ("result.json", "started.json"):
            try:
                return dict(json.loads((folder / name).read_text()))
            except FileNotFoundError:
                continue
        return None

    def start(self, session_id: str, invocation_id: str) -> None:
        """Record a start."""
        folder = self._dir(session_id, invocation_id)
        folder.mkdir(parents=True, exist_ok=True)
        _write(folder / "started.json", state(invocation_id, "in_progress"))

    def finish(self, session_id: str, record: dict[str, Any]) -> None:
        """Record the terminal state."""
        _write(self._dir(session_id, record["invocation_id"]) / "result.json", record)


def _write(path: Path, record: dict[str, Any]) -> None:
    data = json.dumps(record, allow_nan=False)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
