"""The text blocks of a streamed answer, for wire formats that stream reasoning and content
as separate blocks (Anthropic content blocks, Responses output items).

:class:`TextBlocks` decides when a block opens and closes (a change of kind closes the open
block and opens the next, numbered in order) and what is still owed at the end; a
:class:`BlockFormat` of the wire format writes the events of each step.
"""

from __future__ import annotations

import logging
from typing import Literal, Protocol

from rollhub_gateway.protocols.base import owed_deltas
from rollhub_gateway.turns import ParsedOutput

__all__ = ["BlockFormat", "TextBlocks", "TextKind"]

log = logging.getLogger(__name__)

TextKind = Literal["content", "reasoning"]


class BlockFormat(Protocol):
    """The events of one wire format's text blocks; ``index`` numbers the answer's blocks."""

    def open(self, kind: TextKind, index: int) -> list[bytes]:
        """A block of ``kind`` starts."""
        ...

    def delta(self, kind: TextKind, index: int, piece: str) -> list[bytes]:
        """The open block grows by ``piece``."""
        ...

    def close(self, kind: TextKind, index: int, text: str) -> list[bytes]:
        """The open block ends; ``text`` is all it held."""
        ...


class TextBlocks:
    """The blocks written so far of one streamed answer.

    :param fmt: writes the events (one instance per stream: it may keep the stream's state).
    """

    def __init__(self, fmt: BlockFormat) -> None:
        self.fmt = fmt
        #: text streamed so far of each kind
        self.streamed: dict[str, str] = {"content": "", "reasoning": ""}
        #: blocks opened so far, which is the index of the next block
        self.count = 0
        self._kind: TextKind | None = None
        self._text = ""

    def write(self, kind: TextKind, piece: str) -> list[bytes]:
        """Events for ``piece`` of ``kind``: a new block first when the kind changes."""
        out = self.open(kind) if self._kind != kind else []
        self.streamed[kind] += piece
        self._text += piece
        out += self.fmt.delta(kind, self.count - 1, piece)
        return out

    def open(self, kind: TextKind) -> list[bytes]:
        """Close the open block, if any, and open one of ``kind``."""
        out = self.close()
        self._kind, self._text = kind, ""
        self.count += 1
        return out + self.fmt.open(kind, self.count - 1)

    def close(self) -> list[bytes]:
        """Close the open block (nothing when none is open)."""
        if self._kind is None:
            return []
        kind, self._kind = self._kind, None
        return self.fmt.close(kind, self.count - 1, self._text)

    def finish(self, parsed: ParsedOutput) -> list[bytes]:
        """The text the final parse still owes (held back while it could have been tool-call
        markup), then the open block closed."""
        out: list[bytes] = []
        for d in owed_deltas(self.streamed, parsed):
            out += self.write(d.kind, d.text)
        return out + self.close()
