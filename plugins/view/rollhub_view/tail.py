"""Reading a JSONL file that another process is still appending to, by byte offset.

Each call reads only the bytes written since the last one and returns the complete lines
among them (a line still being written waits for its newline). A file that became shorter
(a resumed run truncates ``episodes.jsonl`` back to its checkpoint) or was replaced is read
again from the start, and the caller is told so.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["JsonlTail", "Line"]

log = logging.getLogger(__name__)

#: bytes read per chunk: large enough to be fast, small enough to bound memory
CHUNK = 4 << 20


@dataclass(frozen=True, slots=True)
class Line:
    """One complete JSONL line: where it starts, how many bytes it has, and its value (or
    what the reader's ``convert`` made of it)."""

    offset: int
    length: int
    value: Any


class JsonlTail:
    """Incremental reader of one JSONL file.

    :param path: the file (it may not exist yet).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0  # bytes consumed: the start of the first line not yet returned
        self._ident: tuple[int, int] | None = None  # (device, inode) of the file read

    def read_new(
        self, convert: Callable[[int, int, Any], Any] | None = None
    ) -> tuple[list[Line], bool]:
        """The complete lines written since the last call.

        :param convert: ``(offset, length, value) -> kept`` applied to each line as it is
            parsed (keeps memory small when only a summary of each line is wanted).
        :returns: ``(lines, reset)``; ``reset`` is True when the file shrank or was replaced
            and was read again from its start (earlier lines are no longer valid).
        """
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            reset = self.offset > 0
            self.offset, self._ident = 0, None
            return [], reset
        ident = (st.st_dev, st.st_ino)
        reset = False
        if st.st_size < self.offset or (self._ident is not None and ident != self._ident):
            log.info("%s shrank or was replaced: reading it again", self.path)
            self.offset, reset = 0, True
        self._ident = ident
        if st.st_size == self.offset:
            return [], reset
        lines: list[Line] = []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            pending = b""
            pos = self.offset
            while True:
                chunk = f.read(CHUNK)
                if not chunk:
                    break
                data = pending + chunk
                start = 0
                while True:
                    nl = data.find(b"\n", start)
                    if nl < 0:
                        break
                    raw = data[start:nl]
                    if raw.strip():
                        try:
                            value = json.loads(raw)
                        except ValueError:
                            log.warning("%s: unreadable line at byte %d skipped", self.path,
                                        pos + start)
                        else:
                            off, n = pos + start, nl - start
                            if convert is not None:
                                value = convert(off, n, value)
                            lines.append(Line(off, n, value))
                    start = nl + 1
                pos += start
                pending = data[start:]
        self.offset = pos
        return lines, reset
