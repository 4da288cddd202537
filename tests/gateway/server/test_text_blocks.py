"""The block writer the Anthropic and Responses streams share: when blocks open, close and
what the final parse still owes."""

from __future__ import annotations

from rollhub_gateway.protocols.text_blocks import TextBlocks, TextKind
from rollhub_gateway.turns import ParsedOutput


class Recorder:
    """A block format that writes each step as a readable line."""

    def open(self, kind: TextKind, index: int) -> list[bytes]:
        return [f"open {index} {kind}".encode()]

    def delta(self, kind: TextKind, index: int, piece: str) -> list[bytes]:
        return [f"delta {index} {piece}".encode()]

    def close(self, kind: TextKind, index: int, text: str) -> list[bytes]:
        return [f"close {index} {kind} {text}".encode()]


def lines(chunks: list[bytes]) -> list[str]:
    return [c.decode() for c in chunks]


def test_a_change_of_kind_closes_the_block_and_opens_the_next():
    blocks = TextBlocks(Recorder())
    out = blocks.write("reasoning", "hm") + blocks.write("reasoning", "m")
    out += blocks.write("content", "Hi") + blocks.write("content", "!")
    assert lines(out) == [
        "open 0 reasoning", "delta 0 hm", "delta 0 m",
        "close 0 reasoning hmm", "open 1 content", "delta 1 Hi", "delta 1 !",
    ]  # fmt: skip
    assert blocks.count == 2
    assert blocks.streamed == {"reasoning": "hmm", "content": "Hi!"}


def test_finish_writes_what_the_parse_still_owes_then_closes():
    blocks = TextBlocks(Recorder())
    blocks.write("content", "The answer")
    out = blocks.finish(ParsedOutput(content="The answer is 4", reasoning=None))
    assert lines(out) == ["delta 0  is 4", "close 0 content The answer is 4"]
    assert blocks.close() == []  # closed once


def test_finish_of_nothing_streamed_opens_a_block_only_for_owed_text():
    empty = TextBlocks(Recorder())
    assert empty.finish(ParsedOutput(content="", reasoning=None)) == []
    assert empty.count == 0
    owed = TextBlocks(Recorder())
    out = owed.finish(ParsedOutput(content="ok", reasoning="why"))
    assert lines(out) == [
        "open 0 reasoning", "delta 0 why", "close 0 reasoning why",
        "open 1 content", "delta 1 ok", "close 1 content ok",
    ]  # fmt: skip
