"""A long command outlives its console.

``rollhub run train.toml | head`` or a terminal that closes mid-run leaves stdout (or
stderr) a pipe with no reader: every write raises :class:`BrokenPipeError`. For a listing
command that is the end of it (:func:`rollhub.cli.main`), but a run's console is only a
view of work whose record is its run directory: stopping there would throw away the run,
and exit 0 with nothing trained. Inside :func:`outlive_closed_console` a stream whose
reader went away is pointed at ``/dev/null`` at its first failed write, said once on the
other stream, and the command goes on.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO, cast

log = logging.getLogger(__name__)


class _Survivor:
    """A text stream that turns into ``/dev/null`` when its reader goes away."""

    def __init__(self, stream: TextIO, name: str, what: str) -> None:
        self._stream = stream
        self._name = name
        self._what = what

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._divert()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._divert()

    def _divert(self) -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self._stream.fileno())  # what is still buffered goes there too
        finally:
            os.close(devnull)
        log.warning("%s was closed (its reader went away); %s goes on, its record is in "
                    "its files", self._name, self._what)

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, encoding, ...: the stream's
        return getattr(self._stream, name)


@contextmanager
def outlive_closed_console(what: str) -> Iterator[None]:
    """Keep ``what`` (``"the run"``) going when stdout or stderr loses its reader."""
    saved = sys.stdout, sys.stderr
    # a stand-in with the streams' own methods and attributes, typed as what it stands for
    sys.stdout = cast(TextIO, _Survivor(sys.stdout, "stdout", what))
    sys.stderr = cast(TextIO, _Survivor(sys.stderr, "stderr", what))
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
