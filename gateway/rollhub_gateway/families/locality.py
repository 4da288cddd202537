"""Whether a chat template renders *locally*: the tail it adds for new messages, and
whether it rewrites earlier turns, can be read from a short window of the conversation
(see :func:`rollhub_gateway.chat_templates.render.window`) instead of the whole history.

Many templates carry state across the whole conversation (DeepSeek-V3 renders its
tool-output opener only once per conversation; Qwen3 keys reasoning display on the last
user query), so locality is not assumed: :func:`probe_locality` renders probe
conversations of the family's own shape both ways at start-up and turns windows on only
when every step agrees. Sessions also re-check a window against a whole render every few
turns and turn windows off for good on the first disagreement.
"""

from __future__ import annotations

import itertools
import logging
from typing import TYPE_CHECKING, Any

from rollhub.errors import GatewayError

from rollhub_gateway.turns import ParsedOutput, ToolCall

if TYPE_CHECKING:
    from rollhub_gateway.chat_templates.render import TemplateRenderer

log = logging.getLogger(__name__)

__all__ = ["probe_conversations", "probe_locality"]

_TOOLS = [
    {"type": "function", "function": {"name": n, "description": f"probe tool {n}",
                                      "parameters": {"type": "object",
                                                     "properties": {"q": {"type": "string"}}}}}
    for n in ("lookup", "fetch")
]  # fmt: skip


def probe_conversations(renderer: TemplateRenderer) -> list[tuple[list[dict[str, Any]], Any]]:
    """``(template-form messages, tools)`` probe conversations in the family's shape."""
    fam = renderer.family
    reasoning = "thinking it over" if fam.has_reasoning else None

    pending: list[str] = []  # ids of the calls the next tool messages answer

    def asst(content: str, *calls: str) -> dict[str, Any]:
        tcs = [ToolCall(f"call_{c}_{i}", c, '{"q": "x"}') for i, c in enumerate(calls)]
        pending[:] = [c.id for c in tcs]
        body = "" if calls and not fam.content_with_calls else content
        return fam.to_template_message(
            fam.assistant_message(ParsedOutput(body, reasoning=reasoning, tool_calls=tcs))
        )

    def tool(i: int) -> dict[str, Any]:
        # answers the call it belongs to, as agents do: Gemma 4 looks the tool's name up by id
        return {"role": "tool", "tool_call_id": pending.pop(0), "content": f"result {i}"}

    def user(text: str) -> dict[str, Any]:
        return {"role": "user", "content": text}

    sys = {"role": "system", "content": "probe system"}
    chat = [
        sys,
        user("a"),
        asst("b"),
        user("c"),
        asst("d"),
        user("e"),
        asst("f"),
        user("g"),
        asst("h"),
    ]
    out: list[tuple[list[dict[str, Any]], Any]] = [(chat, None), (chat[1:], None)]
    if fam.supports_tools:
        parallel = ("lookup", "fetch") if fam.content_with_calls else ("lookup",)
        loop = [sys, user("q1"), asst("", "lookup"), tool(0), asst("", *parallel), tool(1)]
        if len(parallel) > 1:
            loop.append(tool(2))
        loop += [
            asst("", "fetch"),
            tool(3),
            asst("", "lookup"),
            tool(4),
            asst("done"),
            user("q2"),
            asst("again", "fetch"),
            tool(5),
            asst("", "lookup"),
            tool(6),
            asst("end"),
            user("q3"),
            asst("bye"),
        ]
        out += [(loop, _TOOLS), (loop[1:], _TOOLS)]
    return out


def probe_locality(renderer: TemplateRenderer) -> bool:
    """Whether window renders agree with whole renders on every probe step."""
    from rollhub_gateway.chat_templates.render import text_digest

    try:
        for messages, tools in probe_conversations(renderer):
            turns = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
            for i, nxt in itertools.pairwise(turns):
                history, new = messages[: i + 1], messages[i + 1 : nxt]
                whole = renderer.texts(history, new, tools, windowed=False)
                prompt = renderer.render_text(history[:-1], tools, generation=True)
                a = renderer.split(whole, len(prompt), text_digest(prompt))
                win = renderer.texts(history, new, tools, windowed=True)
                b = renderer.split(win, None, None) if win.prompt is not None else a
                if a != b:
                    log.info(
                        "family %s: window and whole renders differ at message %d; "
                        "rendering whole conversations",
                        renderer.family.name,
                        i,
                    )
                    return False
    except GatewayError as exc:
        log.info(
            "family %s: probe failed to render (%s); rendering whole conversations",
            renderer.family.name,
            exc,
        )
        return False
    return True
