"""The token path behind the HTTP layer: a :class:`~rollhub_gateway.turns.ChatModel` built
on a Hugging Face tokenizer and a real chat template.

``build_chat_model("smollm2-135m-instruct")`` gives the embedded default (ChatML, no
tools); ``chat_template=`` swaps in a tools-aware template and ``family=`` overrides
detection. With ``journal=`` every committed turn is written to a SQLite journal before
:meth:`HFConversation.commit` returns, and ``new_conversation(sid)`` of a restarted gateway
resumes the session from it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rollhub_gateway.chat_templates.render import TemplateRenderer
from rollhub_gateway.conversation import (
    FORM_CACHE,
    VERIFY_EVERY,
    VERIFY_MAX,
    HFConversation,
    PendingTurn,
)
from rollhub_gateway.families import Family, detect_family, get_family
from rollhub_gateway.families.locality import probe_locality
from rollhub_gateway.journal import SessionJournal
from rollhub_gateway.token_codec import BatchDecoder
from rollhub_gateway.turns import ChatTurn, ParsedOutput, PreparedTurn, StreamingParser

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)

__all__ = [
    "FORM_CACHE",
    "VERIFY_EVERY",
    "VERIFY_MAX",
    "HFChatModel",
    "HFConversation",
    "build_chat_model",
]


def build_chat_model(
    model: str = "smollm2-135m-instruct",
    *,
    chat_template: str | None = None,
    family: str | None = None,
    journal: str | Path | None = None,
    tokenizer: PreTrainedTokenizerBase | None = None,
    template_kwargs: dict[str, Any] | None = None,
) -> HFChatModel:
    """A chat model for the gateway.

    :param model: config word of a packaged model or a local model directory (its
        tokenizer is loaded offline), also used as the model id.
    :param chat_template: a jinja chat template replacing the tokenizer's own.
    :param family: template family override (``"hermes"``, ``"qwen3"``, …); detected from
        the template when omitted.
    :param journal: path of the SQLite session journal; ``None`` keeps sessions in memory.
    :param tokenizer: a ready tokenizer (skips loading ``model``'s).
    :param template_kwargs: extra template variables, e.g. ``{"enable_thinking": False}``.
    :raises ConfigError: unknown family or model.
    """
    if tokenizer is None:
        from rollhub_gateway.models import load_tokenizer

        tokenizer = load_tokenizer(model)
    template = chat_template or getattr(tokenizer, "chat_template", None)
    fam: Family | None = get_family(family) if family else detect_family(template)
    if fam is None:
        log.warning("chat template of %s matches no known family; tools are disabled", model)
        fam = get_family("chatml")
    renderer = TemplateRenderer(tokenizer, fam, chat_template, template_kwargs)
    renderer.windowed = probe_locality(renderer)
    log.info(
        "chat model %s: family %s, window renders %s",
        model,
        fam.name,
        "on" if renderer.windowed else "off",
    )
    from rollhub_gateway.models import context_window

    window = context_window(model)
    if window is None:  # a tokenizer's own limit, unless it is transformers' "unset" sentinel
        limit = getattr(tokenizer, "model_max_length", None)
        window = limit if isinstance(limit, int) and 0 < limit < 10**7 else None
    return HFChatModel(
        renderer,
        model_id=model,
        journal=SessionJournal(journal) if journal else None,
        context_window=window,
    )


class HFChatModel:
    """Tokenizer + template + family, and the factory of per-session conversations."""

    def __init__(
        self,
        renderer: TemplateRenderer,
        *,
        model_id: str,
        journal: SessionJournal | None = None,
        context_window: int | None = None,
    ) -> None:
        self.renderer = renderer
        self.model_id = model_id
        #: the model's context in tokens (the default ``max_context_tokens``); None: unknown
        self.context_window = context_window
        self.family = renderer.family.name
        self.journal = journal
        #: continued turns before a session's first check of a window render against a
        #: whole render (then twice as many each time; 1: check every turn)
        self.verify_every = VERIFY_EVERY

    def supports_tools(self) -> bool:
        """Whether the chat template can render tools and the parser can read calls."""
        return self.renderer.family.supports_tools

    def stop_token_ids(self) -> list[int]:
        """Ids that end a turn (EOS, end-of-turn markers)."""
        return list(self.renderer.stop_ids)

    def count_tokens(self, turn: ChatTurn) -> int:
        """Prompt tokens of a turn rendered from scratch (Anthropic count_tokens)."""
        r = self.renderer
        return len(
            r.encode(r.render_text(r.template_messages(turn.messages), turn.tools, generation=True))
        )

    def new_parser(self, prepared: PreparedTurn | None = None) -> StreamingParser:
        """A parser for one generation.

        :param prepared: the turn being sampled; tells whether its prompt already opened a
            reasoning block (DeepSeek-R1, Qwen3.5 thinking, but not after DeepSeek's tool
            outputs). Without it the template's usual generation prompt decides.
        """
        r = self.renderer
        in_reasoning = r.prompt_opens_reasoning
        if prepared is not None and isinstance(prepared.state, PendingTurn):
            in_reasoning = prepared.state.opens_reasoning
        decoder = BatchDecoder(r.codec, set(r.stop_ids))
        return r.family.new_stream_parser(decoder, in_reasoning=in_reasoning)

    def parse(self, token_ids: list[int], prepared: PreparedTurn | None = None) -> ParsedOutput:
        """Parse a whole generation at once."""
        parser = self.new_parser(prepared)
        parser.feed(token_ids)
        return parser.finish()

    def new_conversation(self, session_id: str) -> HFConversation:
        """Per-session trajectory state; resumed from the journal when it holds the session."""
        conv = HFConversation(self, session_id)
        if self.journal is not None:
            # raises JournalCorruptError when the rows cannot rebuild the session exactly
            if self.journal.state(session_id) == "done":
                # a finished session's records were handed out; its id starts afresh
                self.journal.discard(session_id)
            turns = self.journal.turns(session_id)
            if turns:
                conv._recover(turns)
            else:
                self.journal.open_session(session_id, self.model_id)
        return conv

    def open_sessions(self) -> list[str]:
        """Sessions the journal holds that were never finished (to resume after a restart)."""
        return self.journal.open_sessions() if self.journal else []
