"""Rendering messages to prompt ids with a real chat template, and token-in/token-out
continuity.

Continuity, in one paragraph: after turn *k* the session holds the exact ids the model
saw and sampled, ``ids_k = prompt_k + output_k``. When turn *k+1*'s messages are turn
*k*'s messages plus the assistant message we returned plus new messages, we render two
texts with the template: ``T`` (history through our assistant message, no generation
prompt) and ``F`` (the whole new conversation, generation prompt on). If ``T`` starts with
the text of prompt *k* and ``F`` starts with ``T``, the template did not rewrite the
history, and the new prompt is ``ids_k`` + the ids of the text the template puts after
the sampled output: the rest of the assistant's end-of-turn (e.g. ``"\\n"`` after a sampled
``<|im_end|>``) and ``F[len(T):]``. Only that tail is tokenised. The tail is tokenised
alone, which is exact when the boundary sits at an added (special) token: tokenizers split
added tokens out before any merge, so no BPE merge can cross them. Anything else (a
rewritten history, a sampled stop token the template renders differently, a boundary
inside plain text) makes :meth:`TemplateRenderer.continuation` return ``None`` and the
caller re-renders the whole conversation.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any

from rollhub.errors import GatewayError
from rollhub_gateway.families.base import Family

log = logging.getLogger(__name__)

__all__ = ["Continuation", "TemplateRenderer", "text_digest"]


def text_digest(text: str) -> str:
    """A short digest of a prompt text (continuity checks keep this, not the text)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


@dataclass(frozen=True)
class Continuation:
    """Result of a continuity attempt: the text to append after the previous ids."""

    extra_text: str
    full_text: str


class TemplateRenderer:
    """A tokenizer + chat template + family: renders and tokenises conversations.

    :param tokenizer: a Hugging Face tokenizer (``apply_chat_template``, ``encode``).
    :param family: the template family (message shape, stop tokens).
    :param chat_template: a template overriding the tokenizer's own.
    """

    def __init__(self, tokenizer: Any, family: Family, chat_template: str | None = None) -> None:
        self.tokenizer = tokenizer
        self.family = family
        self.chat_template = chat_template or getattr(tokenizer, "chat_template", None)
        if not self.chat_template:
            raise GatewayError("the tokenizer has no chat template and none was configured")
        vocab = tokenizer.get_vocab()
        stops: dict[int, str] = {}
        for text in (*family.stop_tokens, getattr(tokenizer, "eos_token", None)):
            if text and text in vocab:
                stops[vocab[text]] = text
        self.stop_texts = stops
        self.stop_ids = sorted(stops)
        added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
        self.added_ids: set[int] = set(added)
        self.added_texts: tuple[str, ...] = tuple(str(t) for t in added.values())
        probe = self.render_text([{"role": "user", "content": "x"}], None, generation=True)
        open_ = family.reasoning_markup[0] if family.reasoning_markup else None
        #: the generation prompt opens the reasoning block (R1 distill, Qwen3.5 thinking)
        self.prompt_opens_reasoning = bool(open_) and probe.rstrip().endswith(open_)

    # Rendering -------------------------------------------------------------------------------

    def render_text(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, *, generation: bool
    ) -> str:
        """The template's text for template-form messages."""
        try:
            return self.tokenizer.apply_chat_template(
                messages,
                tools=tools or None,
                chat_template=self.chat_template,
                tokenize=False,
                add_generation_prompt=generation,
                **self.family.template_kwargs,
            )
        except Exception as exc:  # jinja raises anything, including TemplateError
            raise GatewayError(
                f"chat template of family {self.family.name!r} failed to render: {exc}"
            ) from exc

    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` as the template's text (no BOS added: templates write their own)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def template_messages(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Neutral messages in this family's template form."""
        return [self.family.to_template_message(m) for m in messages]

    # Continuity ------------------------------------------------------------------------------

    def continuation(
        self,
        *,
        prev_prompt_len: int,
        prev_prompt_digest: str,
        output_ids: list[int],
        through_text: str,
        full_text: str,
    ) -> Continuation | None:
        """The text to append after ``prev prompt ids + output_ids``, or ``None``.

        :param prev_prompt_len: length of the previous prompt's text.
        :param prev_prompt_digest: :func:`text_digest` of the previous prompt's text.
        :param output_ids: the ids sampled after that prompt.
        :param through_text: history through our assistant message, no generation prompt.
        :param full_text: the new conversation with the generation prompt.
        """
        if not full_text.startswith(through_text):
            return None
        if text_digest(through_text[:prev_prompt_len]) != prev_prompt_digest:
            return None
        assistant = through_text[prev_prompt_len:]
        tail = full_text[len(through_text) :]
        last = output_ids[-1] if output_ids else None
        # the template's end-of-turn marker: the last stop text in the assistant's rendering
        cut, cut_text = -1, ""
        for text in self.stop_texts.values():
            i = assistant.rfind(text)
            if i > cut:
                cut, cut_text = i, text
        if last in self.stop_texts:
            sampled = self.stop_texts[last]
            if cut >= 0 and cut_text == sampled:
                extra = assistant[cut + len(sampled) :] + tail
            elif cut < 0 and tail.startswith(sampled):
                # templates that end a turn by opening the next one (GLM): the sampled
                # stop token is the first token of the tail
                extra = tail[len(sampled) :]
            else:
                log.debug("sampled stop %r is rendered as %r: history rewritten", sampled, cut_text)
                return None
            boundary_safe = True
        else:
            extra = (assistant[cut:] if cut >= 0 else "") + tail
            boundary_safe = last in self.added_ids
        if extra and not boundary_safe and not extra.startswith(self.added_texts):
            log.debug("tail %r does not start at an added token: re-render", extra[:40])
            return None
        return Continuation(extra, full_text)


def canonical_tools(tools: list[dict[str, Any]] | None) -> str:
    """A stable key for a tool list (for matching turns)."""
    return json.dumps(tools or [], sort_keys=True, ensure_ascii=False)
