"""Stop sequences as the wire APIs define them.

Engines are asked to keep the stop string in their output (vLLM
``include_stop_str_in_output``, SGLang ``no_stop_trim``) so the trace holds every id that
was sampled, the stop string's ids included. The APIs, though, return text *without* the
stop sequence (OpenAI) and name the one that matched (Anthropic ``stop_sequence``).
:func:`cut_at_stop` gives the caller's view of a finished output, and :class:`StopHoldback`
keeps a stream from sending any part of a stop string before the engine's output is known.

The assistant message committed to the session is the cut one, since that is what the agent
sends back as history. The stop string's ids stay in the record with mask 1 (they were
sampled), and the next turn continues after them like after any sampled id: the model's
context holds what it sampled, the agent's copy of the message does not
(docs/token-fidelity.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from rollhub_gateway.turns import OutputDelta, ParsedOutput

__all__ = ["StopHoldback", "cut_at_stop"]


def _first_stop(text: str, stops: Sequence[str]) -> tuple[int, str] | None:
    """``(index, stop)`` of the earliest stop string in ``text`` (an engine stops there)."""
    best: tuple[int, str] | None = None
    for stop in stops:
        if not stop:
            continue
        at = text.find(stop)
        if at >= 0 and (best is None or at < best[0]):
            best = (at, stop)
    return best


def cut_at_stop(parsed: ParsedOutput, stops: Sequence[str]) -> tuple[ParsedOutput, str | None]:
    """The output without the matched stop sequence and what follows it, and that sequence.

    Only the visible content is cut: tool calls and reasoning are returned as parsed. Returns
    ``(parsed, None)`` unchanged when no stop string occurs in the content.
    """
    hit = _first_stop(parsed.content, stops) if stops else None
    if hit is None:
        return parsed, None
    at, stop = hit
    return dataclasses.replace(parsed, content=parsed.content[:at]), stop


class StopHoldback:
    """Filters a stream's content deltas so no part of a stop string is ever sent.

    Text that could still grow into a stop string is held back; once a stop string is
    complete, no more content is sent. What is owed at the end is sent from the cut final
    parse (``owed_deltas``), so the streamed text equals the non-streamed one.
    """

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s for s in stops if s]
        self._held = ""
        self._stopped = False

    def feed(self, delta: OutputDelta) -> OutputDelta | None:
        """The part of ``delta`` that is safe to send now (None: nothing yet)."""
        if not self.stops or delta.kind != "content":
            return delta
        if self._stopped:
            return None
        self._held += delta.text
        hit = _first_stop(self._held, self.stops)
        if hit is not None:
            self._stopped = True
            safe, self._held = self._held[: hit[0]], ""
        else:
            keep = self._partial_suffix(self._held)
            safe, self._held = (
                self._held[: len(self._held) - keep],
                self._held[len(self._held) - keep :],
            )
        return OutputDelta("content", safe) if safe else None

    def _partial_suffix(self, text: str) -> int:
        """Length of the longest suffix of ``text`` that is a proper prefix of a stop string."""
        best = 0
        for stop in self.stops:
            for n in range(min(len(stop) - 1, len(text)), best, -1):
                if text.endswith(stop[:n]):
                    best = n
                    break
        return best
