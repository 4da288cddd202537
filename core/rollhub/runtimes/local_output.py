"""Reading a local worker's stdout and stderr for as long as it lives.

A pipe nobody reads fills up (64 KiB on Linux) and the next ``print`` in the agent blocks
forever, so both pipes are drained until the worker exits, whatever the agent writes:
lines of any length (read in chunks, not with ``readline``, whose 64 KiB limit would end
the reader), binary junk, floods. Lines go to this module's logger with the worker's
index, at most :data:`LINES_PER_S` a second per worker (the rest are counted and the count
is logged), each cut to :data:`MAX_LOGGED_CHARS`. The last lines of stderr are kept for
start-up error messages.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from collections.abc import Callable

__all__ = ["LINES_PER_S", "MAX_LOGGED_CHARS", "WorkerOutput"]

log = logging.getLogger(__name__)

#: Lines per second one worker may put into the log; the rest are counted.
LINES_PER_S = 50
#: Longest line put into the log; longer ones are cut (the full length is noted).
MAX_LOGGED_CHARS = 2000
#: Bytes kept of an unfinished line; beyond that it is logged in pieces.
MAX_LINE_BYTES = 1024 * 1024
_CHUNK = 64 * 1024


class WorkerOutput:
    """Drains one worker's stdout and stderr; finds the port announcement on stdout.

    :param index: the worker's index (put into every log line).
    :param tail: where the last stderr lines are kept.
    """

    def __init__(self, index: int, tail: deque[str]) -> None:
        self.index = index
        self.tail = tail
        self.port: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._window_start = time.monotonic()
        self._window_lines = 0
        self._suppressed = 0
        #: lines read so far (both streams); for tests
        self.lines = 0

    def start(self, proc: asyncio.subprocess.Process) -> list[asyncio.Task[None]]:
        """Start one reader task per pipe; they end when the worker closes its pipes."""
        loop = asyncio.get_running_loop()
        tasks = []
        if proc.stdout is not None:
            tasks.append(loop.create_task(self._read(proc.stdout, self._stdout_line)))
        if proc.stderr is not None:
            tasks.append(loop.create_task(self._read(proc.stderr, self._stderr_line)))
        return tasks

    async def _read(self, stream: asyncio.StreamReader, on_line: Callable[[str], None]) -> None:
        pending = b""
        try:
            while True:
                chunk = await stream.read(_CHUNK)
                if not chunk:
                    break
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    on_line(line.decode(errors="replace").rstrip("\r"))
                while len(pending) > MAX_LINE_BYTES:
                    piece, pending = pending[:MAX_LINE_BYTES], pending[MAX_LINE_BYTES:]
                    on_line(piece.decode(errors="replace"))
            if pending:
                on_line(pending.decode(errors="replace"))
        finally:
            self._flush_suppressed()
            if not self.port.done():
                self.port.set_exception(
                    ConnectionError("the worker exited before it announced its port")
                )

    def _stdout_line(self, text: str) -> None:
        if not self.port.done() and text.startswith("{"):
            try:
                self.port.set_result(int(json.loads(text)["port"]))
                return
            except (ValueError, KeyError, TypeError):
                pass
        self._log("stdout", text)

    def _stderr_line(self, text: str) -> None:
        self.tail.append(text[:MAX_LOGGED_CHARS])
        self._log("stderr", text)

    def _log(self, stream: str, text: str) -> None:
        self.lines += 1
        now = time.monotonic()
        if now - self._window_start >= 1.0:
            self._flush_suppressed()
            self._window_start, self._window_lines = now, 0
        if self._window_lines >= LINES_PER_S:
            self._suppressed += 1
            return
        self._window_lines += 1
        shown = text
        if len(text) > MAX_LOGGED_CHARS:
            shown = f"{text[:MAX_LOGGED_CHARS]}… ({len(text)} characters)"
        # The worker's own logging prefixes its level; keep warnings and errors visible.
        level = logging.INFO
        if text.startswith(("ERROR", "CRITICAL", "Traceback")):
            level = logging.ERROR
        elif text.startswith("WARNING"):
            level = logging.WARNING
        log.log(level, "worker %d %s: %s", self.index, stream, shown)

    def _flush_suppressed(self) -> None:
        if self._suppressed:
            log.warning(
                "worker %d: %d output lines not logged (over %d lines/s)",
                self.index, self._suppressed, LINES_PER_S,
            )  # fmt: skip
            self._suppressed = 0
