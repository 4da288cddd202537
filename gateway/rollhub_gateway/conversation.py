"""One session's side of the token path: :class:`HFConversation` renders each turn's prompt
ids with continuity (reusing the ids of the history it extends), records sampled turns in
the session's turn tree (and journal), and hands out the records.

The session keeps its messages once, in the neutral form the agent sends (our answers as
we wrote them); the template form of a message is made when a render needs it and kept
for the messages rendered last, which are the window of the next turns.
"""

from __future__ import annotations

import logging
from typing import Any

from rollhub.errors import GatewayError
from rollhub.trace import DriftKind

from rollhub_gateway.chat_templates.render import (
    Continuation,
    TurnTexts,
    canonical_tools,
    text_digest,
    window,
)
from rollhub_gateway.trajectory import (
    TrajectoryTree,
    TurnNode,
    message_key,
    prefix_digests,
)
from rollhub_gateway.trajectory import count_window_mismatch as _count_window_mismatch
from rollhub_gateway.trajectory.record import ConversationModel, PendingTurn, TurnRecords
from rollhub_gateway.turns import ChatTurn, PreparedTurn

log = logging.getLogger(__name__)

__all__ = [
    "FORM_CACHE",
    "VERIFY_EVERY",
    "VERIFY_MAX",
    "HFConversation",
]

#: after this many continued turns a session checks a window render against a whole one
VERIFY_EVERY = 16
#: the longest interval between two such checks (intervals double from VERIFY_EVERY)
VERIFY_MAX = 512
#: template forms a session keeps (of the messages it rendered last)
FORM_CACHE = 16


class HFConversation(TurnRecords):
    """One session's trajectory: renders turns with continuity and records them."""

    def __init__(self, model: ConversationModel, session_id: str) -> None:
        self.model = model
        self.session_id = session_id
        self.tree = TrajectoryTree(session_id, model.model_id)
        self._next_turn = 0
        self._since_verify = 0
        self._verify_interval: int | None = None
        self._opens_reasoning = False
        # the last tools: as sent, their key, and the frozen copy templates render
        self._tools: tuple[list[dict[str, Any]] | None, str, list[Any] | None] = (
            None,
            canonical_tools(None),
            None,
        )
        # id(neutral message) -> (that message, its template form), least recent first
        self._form_cache: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}
        self.finished = False

    # prepare ---------------------------------------------------------------------------------

    def prepare(self, turn: ChatTurn) -> PreparedTurn:
        """Render a turn's prompt ids, reusing previous ids when the history extends them.

        When ``turn.messages`` re-sends a branch tip's request and our answer to it exactly
        as we wrote it, those elements of the list are replaced by the equal messages the
        session already holds.

        :raises GatewayError: tools given to a template family that cannot render them
            (before anything is sampled), naming the config override.
        """
        r = self.model.renderer
        if turn.tools and not r.family.supports_tools:
            raise GatewayError(
                f"model {self.model.model_id!r} uses chat template family {r.family.name!r}, "
                "which cannot render tools or parse tool calls; configure a tools-aware "
                'chat_template and, if it is not detected, set family = "hermes" (or another '
                "family) in the gateway config",
                field="family",
            )
        if not turn.messages:
            raise GatewayError("a chat turn needs at least one message", field="messages")
        tools_key = self._tools_key(turn.tools)
        tools = self._tools[2]
        parent, digest = self._match(turn.messages, tools_key, turn.policy)
        known = len(parent.messages) if parent else 0
        new = turn.messages[known:]
        history = (parent.messages if parent else []) + new
        base, extra, drift, masked, prompt_text = self._continue(parent, new, tools)
        # the engine gets a list of its own (the turn keeps ``extra``)
        if base is not None:
            prompt = self.tree.ids_through(base).tolist()
            prompt += extra  # in place: one list of the whole prompt, not two
        else:
            prompt = list(extra)
        index = self._next_turn
        self._next_turn += 1
        state = PendingTurn(
            parent,
            base,
            extra,
            history,
            digest,
            prompt_text,
            tools_key,
            masked,
            self._opens_reasoning,
            turn.messages,
            turn.policy,
        )
        return PreparedTurn(prompt_ids=prompt, drift=drift, turn_index=index, state=state)

    def _tools_key(self, tools: list[dict[str, Any]] | None) -> str:
        """The tools' key; one string per session while its tools stay the same (every
        turn node holds it)."""
        if tools == self._tools[0]:
            return self._tools[1]
        key, frozen = self.model.renderer.shared_tools.get(tools, canonical_tools(tools))
        self._tools = (tools, key, frozen)
        return key

    def _match(
        self, messages: list[dict[str, Any]], tools_key: str, policy: str | None = None
    ) -> tuple[TurnNode | None, str]:
        """The node the conversation extends, and the digest of the whole conversation.

        Fast path: the agent re-sent a branch tip's request unchanged (plain equality) and
        our answer (semantically): only the new messages are hashed. Otherwise every
        message is hashed and the tree searched (edits, replays, sub-agents). Only turns of
        ``policy`` are continued: another policy's turns start a record of their own.
        """
        for branch in reversed(self.tree.branches):
            tip = branch.tip
            if (tip is None or tip.sent is None or tip.tools_key != tools_key
                    or tip.policy != policy):
                continue
            n = len(tip.sent)
            if len(messages) > n + 1 and messages[:n] == tip.sent:
                ours, theirs = tip.messages[-1], messages[n]
                if theirs is ours or _same_answer(theirs, ours):
                    # the agent re-sent our answer as we wrote it: the session keeps one
                    # copy of it (the parsed list is the gateway's own), reading as the
                    # agent sends it, so that its next request compares equal as sent
                    if "content" not in theirs:
                        ours.pop("content", None)
                    messages[n] = ours
                elif message_key(theirs) != tip.answer_key:
                    continue
                # a call parsed afresh (a route's first call, an edited history) hands in
                # equal copies: the session keeps the ones it holds, so that its history
                # and the last request share their messages
                messages[:n] = tip.sent
                return tip, prefix_digests(messages[n + 1 :], tip.history_digest)[-1]
        digests = prefix_digests(messages)
        return self.tree.find_parent(digests, tools_key, policy), digests[-1]

    def _continue(
        self, parent: TurnNode | None, new: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> tuple[TurnNode | None, list[int], DriftKind, int, str | None]:
        """``(base, extra ids, drift, masked tokens, whole prompt text if rendered)``."""
        r = self.model.renderer
        if parent is None:
            forms = self._forms(new)
            full_text = self._whole(forms, tools)
            drift: DriftKind = "fork" if self.tree.nodes else "append"
            ids = r.encode_prompt(full_text, forms, tools, self._tools[1])
            return None, ids, drift, 0, full_text
        is_tip = parent.branch is not None and parent.branch.tip is parent
        kind: DriftKind = "append" if is_tip else "fork"
        cont = self._continuation(parent, new, tools)
        if cont is not None:
            return parent, r.encode(cont.extra_text), kind, 0, cont.full_text
        full_text = self._whole(self._forms(parent.messages + new), tools)
        ids = r.encode(full_text)
        prev = self.tree.ids_through(parent).tolist()
        if ids[: len(prev)] == prev:  # a whole render that happens to extend the ids
            return parent, ids[len(prev) :], kind, 0, full_text
        masked = self.tree.sampled_dropped(parent, ids)
        log.debug("session %s: history rewritten, %d sampled ids dropped", self.session_id, masked)
        return None, ids, "rerender" if is_tip else "fork", masked, full_text

    def _whole(self, forms: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        text = self.model.renderer.render_text(forms, tools, generation=True)
        self._opens_reasoning = self._ends_in_reasoning(text)
        return text

    def _texts(
        self,
        history: list[dict[str, Any]],
        new: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        *,
        windowed: bool,
    ) -> TurnTexts:
        """:meth:`TemplateRenderer.texts` of neutral messages: only the window's messages
        are put in template form."""
        if windowed:
            history, new = window(history, new)
        r = self.model.renderer
        return r.texts(self._forms(history), self._forms(new), tools, windowed=windowed)

    def _forms(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Template forms of neutral messages.

        A session keeps its messages once, in neutral form; the template form is made when
        a render needs it and kept for the :data:`FORM_CACHE` messages rendered last (the
        window of the next turns: a continued turn converts only the messages it adds; a
        whole render converts the rest again). A form that reads the same as its message
        is the message itself.
        """
        cache = self._form_cache
        to_template = self.model.renderer.family.to_template_message
        out = []
        for m in messages:
            key = id(m)
            hit = cache.pop(key, None)
            if hit is None or hit[0] is not m:
                form = to_template(m)
                hit = (m, m if form == m else form)  # holding ``m`` keeps its id unused
                if len(cache) >= FORM_CACHE:
                    del cache[next(iter(cache))]  # the least recently rendered
            cache[key] = hit
            out.append(hit[1])
        return out

    def _ends_in_reasoning(self, text: str) -> bool:
        markup = self.model.renderer.family.reasoning_markup
        if not markup:
            return False
        return text.rstrip().endswith(markup[0])

    def _continuation(
        self, parent: TurnNode, new: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> Continuation | None:
        """Continuity from ``parent``: over a window when the template renders locally,
        checked against a whole render after ``verify_every`` continued turns, then after
        twice as many each time (up to :data:`VERIFY_MAX`; ``verify_every=1`` checks every
        turn). A check renders the whole conversation, so checks spaced as the session
        grows keep their cost per turn flat instead of growing with the session."""
        r = self.model.renderer
        self._since_verify += 1
        if self._verify_interval is None or self.model.verify_every <= 1:
            self._verify_interval = self.model.verify_every
        windowed = r.windowed and self._since_verify < self._verify_interval
        texts = self._texts(parent.messages, new, tools, windowed=windowed)
        self._opens_reasoning = self._ends_in_reasoning(texts.full)
        prev_len, prev_digest = parent.prompt_text_len, parent.prompt_text_digest
        if texts.prompt is None and prev_len is None:
            prompt = r.render_text(self._forms(parent.messages[:-1]), tools, generation=True)
            prev_len, prev_digest = len(prompt), text_digest(prompt)
        cont = r.continuation(
            texts,
            output_ids=parent.output_ids,
            prev_prompt_len=prev_len,
            prev_prompt_digest=prev_digest,
        )
        if r.windowed and not windowed:
            self._since_verify = 0
            self._verify_interval = min(2 * self._verify_interval, VERIFY_MAX)
            win = r.continuation(
                self._texts(parent.messages, new, tools, windowed=True),
                output_ids=parent.output_ids,
            )
            if (win and win.extra_text) != (cont and cont.extra_text):
                log.error(
                    "chat template of family %s does not render locally after all: "
                    "window renders turned off",
                    r.family.name,
                )
                r.windowed = False
                _count_window_mismatch()
        return cont


def _same_answer(theirs: dict[str, Any], ours: dict[str, Any]) -> bool:
    """Equal, or equal but for a ``None`` content one of them leaves out."""
    if theirs == ours:
        return True
    if theirs.get("content") is not None or ours.get("content") is not None:
        return False
    return {k: v for k, v in theirs.items() if k != "content"} == {
        k: v for k, v in ours.items() if k != "content"
    }
