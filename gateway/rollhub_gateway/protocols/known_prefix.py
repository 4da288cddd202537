"""Parsing only what is new on routes whose wire items are not neutral messages.

An agent re-sends its whole conversation on every call. On the Chat Completions route a
message in neutral form reads exactly as sent, so the re-sent ones are compared with the
session's own messages (:mod:`openai_chat_input`). Anthropic's content blocks and the
Responses API's items are shaped differently (one Anthropic user message can hold several
tool results; a Responses ``function_call`` item joins the assistant message before it),
so those adapters keep a :class:`KnownPrefix` of the session's previous call: its wire
items as sent and, at each item boundary, how many neutral messages the items before it
made. The leading items sent exactly as before are not parsed again; their neutral
messages are the previous turn's, which the session has since swapped for the ones it
holds, so history and request share them.

The price is the previous call's decoded items, held by the session until its next call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rollhub_gateway.turns import ChatTurn

__all__ = ["KnownPrefix", "reusable_prefix"]


@dataclass
class KnownPrefix:
    """What an adapter keeps of a session's last call to parse its next one.

    :param lead: what precedes the items and makes the first neutral message (Anthropic
        ``system``, Responses ``instructions``), as sent.
    :param items: the wire items as sent.
    :param ends: ``ends[i]``: neutral messages the lead and ``items[:i]`` made, or ``None``
        where a parse cannot resume (state carried into ``items[i]``); ``len(items) + 1``
        entries.
    :param turn: the call's neutral turn; its ``messages`` list is the one the session
        updates in place when it matches the call to its history.
    """

    lead: Any
    items: list[Any]
    ends: list[int | None]
    turn: ChatTurn


def reusable_prefix(
    items: object, lead: object, known: KnownPrefix | None
) -> tuple[int, list[dict[str, Any]], list[int | None]]:
    """``(k, messages, ends)``: the first ``k`` items were sent as in ``known``; ``messages``
    are the neutral messages they (and the lead) made and ``ends`` their boundaries
    (``k + 1`` entries). ``k == 0`` when nothing can be reused (or ``items`` is not a
    list): parse everything."""
    if known is None or not isinstance(items, list) or lead != known.lead:
        return 0, [], []
    n = min(len(items), len(known.items))
    k = n
    if items[:n] != known.items[:n]:  # one comparison in C in the usual case: all re-sent
        k = next(i for i in range(n) if items[i] != known.items[i])
    while k > 0 and known.ends[k] is None:
        k -= 1
    if k == 0:
        return 0, [], []
    end = known.ends[k]
    assert end is not None
    return k, known.turn.messages[:end], known.ends[: k + 1]
