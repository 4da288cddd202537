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
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rollhub.errors import GatewayError

from rollhub_gateway.chat_templates.environment import SharedTools, compile_template
from rollhub_gateway.families.base import Family
from rollhub_gateway.token_codec import TokenCodec

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)

__all__ = [
    "PREFIX_CACHE",
    "Continuation",
    "TemplateRenderer",
    "TurnTexts",
    "text_digest",
    "window",
]

#: shared prompt prefixes (system messages + tools) a renderer keeps the ids of
PREFIX_CACHE = 64


def text_digest(text: str) -> str:
    """A short digest of a prompt text (continuity checks keep this, not the text)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


@dataclass(frozen=True)
class TurnTexts:
    """Rendered texts of a turn: ``through`` = history through our assistant message (no
    generation prompt), ``full`` = the new conversation with the generation prompt, and
    ``prompt`` = the history's prompt before that assistant message (window renders only;
    whole renders compare against the stored digest of the previous prompt instead)."""

    prompt: str | None
    through: str
    full: str


@dataclass(frozen=True)
class Continuation:
    """Result of a continuity attempt: the text to append after the previous ids, and the
    whole new prompt text when it was rendered whole."""

    extra_text: str
    full_text: str | None


class TemplateRenderer:
    """A tokenizer + chat template + family: renders and tokenises conversations.

    :param tokenizer: a Hugging Face tokenizer (``apply_chat_template``, ``encode``).
    :param family: the template family (message shape, stop tokens).
    :param chat_template: a template overriding the tokenizer's own.
    :param template_kwargs: extra variables for the template (``{"enable_thinking": False}``).
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        family: Family,
        chat_template: str | None = None,
        template_kwargs: dict[str, Any] | None = None,
    ) -> None:
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
        #: extra template variables (e.g. ``enable_thinking``)
        self.template_kwargs = {**family.template_kwargs, **(template_kwargs or {})}
        self._compiled = compile_template(self.chat_template)
        #: render continuations over a window (set when probe_locality clears the template)
        self.windowed = False
        self._template_vars = {
            k: v
            for k, v in (getattr(tokenizer, "special_tokens_map", {}) or {}).items()
            if isinstance(v, str)
        }
        #: the template's own variables (special tokens, then template_kwargs), merged once
        self._render_vars = {**self._template_vars, **self.template_kwargs}
        probe = self.render_text([{"role": "user", "content": "x"}], None, generation=True)
        #: text ↔ ids straight through the Rust tokenizer when that agrees with the wrapper
        self.codec = TokenCodec(tokenizer, extra_probes=(probe,))
        # shared prompt prefixes (system messages + tools): their text, then their ids
        self._prefix_texts: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._prefix_ids: OrderedDict[tuple[str, str], tuple[int, ...]] = OrderedDict()
        #: frozen tool lists shared by this renderer's sessions
        self.shared_tools = SharedTools(PREFIX_CACHE)
        open_ = family.reasoning_markup[0] if family.reasoning_markup else None
        #: the generation prompt opens the reasoning block (R1 distill, Qwen3.5 thinking)
        self.prompt_opens_reasoning = bool(open_ and probe.rstrip().endswith(open_))

    # Rendering -------------------------------------------------------------------------------

    def render_text(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        *,
        generation: bool,
    ) -> str:
        """The template's text for template-form messages.

        Renders the compiled template directly with the variables ``apply_chat_template``
        passes (special tokens, tools, ``add_generation_prompt``), skipping its per-call
        copy of every message: template-form messages are already plain dicts. A test
        checks the two agree on every supported template.
        """
        try:
            if self._compiled is not None:
                return self._compiled.render(
                    messages=messages,
                    tools=tools or None,
                    documents=None,
                    add_generation_prompt=generation,
                    **self._render_vars,
                )
            text = self.tokenizer.apply_chat_template(
                messages,
                tools=list(tools) if tools else None,
                chat_template=self.chat_template,
                tokenize=False,
                add_generation_prompt=generation,
                **self.template_kwargs,
            )
            assert isinstance(text, str)  # tokenize=False renders text
            return text
        except Exception as exc:  # jinja raises anything, including TemplateError
            raise GatewayError(
                f"chat template of family {self.family.name!r} failed to render: {exc}"
            ) from exc

    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` as the template's text (no BOS added: templates write their own)."""
        return self.codec.encode(text)

    def encode_prompt(
        self,
        text: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        tools_key: str,
    ) -> list[int]:
        """Ids of a whole rendered prompt; the part the leading system messages and the tools
        render to comes from a cache shared by every session.

        Sessions of one agent start with the same system prompt and tool schemas, often
        most of the first prompt. Their text is tokenised once; each prompt tokenises only
        what follows it. Splitting there is exact when the rest starts with an added
        token (nothing merges across one); each cache entry is checked against a whole
        encoding once, for the added token that follows it.

        :param text: the whole prompt text rendered from ``messages`` (template form) and
            ``tools``.
        :param tools_key: :func:`canonical_tools` of ``tools``.
        """
        n_sys = 0
        while n_sys < len(messages) and messages[n_sys].get("role") == "system":
            n_sys += 1
        if not 0 < n_sys < len(messages):
            return self.encode(text)
        key = (tools_key, json.dumps(messages[:n_sys], sort_keys=True, default=str))
        prefix = self._prefix_texts.get(key)
        if prefix is None:
            try:
                prefix = self.render_text(messages[:n_sys], tools, generation=False)
            except GatewayError:  # a template that cannot render system messages alone
                prefix = ""
            self._prefix_texts[key] = prefix
            if len(self._prefix_texts) > PREFIX_CACHE:
                self._prefix_texts.popitem(last=False)
        rest = text[len(prefix) :]
        after = next((t for t in self.added_texts if rest.startswith(t)), None)
        if not prefix or after is None or not text.startswith(prefix):
            return self.encode(text)
        ids = self._prefix_ids.get((prefix, after))
        if ids is None:
            whole, ids = self.encode(text), tuple(self.encode(prefix))
            if whole[: len(ids)] != list(ids):  # the tokenizer joins across this boundary
                ids = ()
            self._prefix_ids[(prefix, after)] = ids
            if len(self._prefix_ids) > PREFIX_CACHE:
                self._prefix_ids.popitem(last=False)
            return whole
        if not ids:
            return self.encode(text)
        return [*ids, *self.encode(rest)]

    def template_messages(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Neutral messages in this family's template form."""
        return [self.family.to_template_message(m) for m in messages]

    # Continuity ------------------------------------------------------------------------------

    def texts(
        self,
        history: list[dict[str, Any]],
        new: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        *,
        windowed: bool,
    ) -> TurnTexts:
        """The texts continuity compares, over the whole conversation or a window of it.

        :param history: template-form messages through our last assistant message.
        :param new: template-form messages the agent added after it.
        :param windowed: render only :func:`window` of the conversation (cost independent
            of the history's length; only for templates :func:`probe_locality` cleared).
        """
        prompt: str | None = None
        if windowed:
            history, new = window(history, new)
            prompt = self.render_text(history[:-1], tools, generation=True)
        through = self.render_text(history, tools, generation=False)
        full = self.render_text(history + new, tools, generation=True)
        return TurnTexts(prompt, through, full)

    def continuation(
        self,
        texts: TurnTexts,
        *,
        output_ids: Sequence[int],
        prev_prompt_len: int | None = None,
        prev_prompt_digest: str | None = None,
    ) -> Continuation | None:
        """The text to append after ``previous prompt ids + output_ids``, or ``None``.

        :param texts: from :meth:`texts`.
        :param output_ids: the ids sampled after the previous prompt.
        :param prev_prompt_len: length of the previous prompt's text (whole renders).
        :param prev_prompt_digest: :func:`text_digest` of the previous prompt's text.
        """
        split = self.split(texts, prev_prompt_len, prev_prompt_digest)
        if split is None:
            return None
        assistant, tail = split
        extra = self.after_output(assistant, tail, output_ids)
        if extra is None:
            return None
        last = output_ids[-1] if output_ids else None
        safe = last in self.added_ids or not extra or extra.startswith(self.added_texts)
        if not safe:
            log.debug("tail %r does not start at an added token: re-render", extra[:40])
            return None
        return Continuation(extra, texts.full if texts.prompt is None else None)

    def split(
        self, texts: TurnTexts, prev_prompt_len: int | None, prev_prompt_digest: str | None
    ) -> tuple[str, str] | None:
        """``(assistant rendering, new tail)``, or ``None`` when the history was rewritten."""
        through, full = texts.through, texts.full
        if not full.startswith(through):
            return None
        if texts.prompt is not None:
            if not through.startswith(texts.prompt):
                return None
            cut = len(texts.prompt)
        else:
            if prev_prompt_len is None or prev_prompt_digest is None:
                return None
            if text_digest(through[:prev_prompt_len]) != prev_prompt_digest:
                return None
            cut = prev_prompt_len
        return through[cut:], full[len(through) :]

    def after_output(self, assistant: str, tail: str, output_ids: Sequence[int]) -> str | None:
        """The text the template renders after the sampled ids: the rest of the assistant
        turn's end (e.g. ``"\\n"`` after a sampled ``<|im_end|>``) and the new tail.

        ``None`` when the template renders the sampled stop token differently (GPT-OSS
        ``<|return|>`` → ``<|end|>``): a rewrite.
        """
        last = output_ids[-1] if output_ids else None
        cut, cut_text = -1, ""
        for text in self.stop_texts.values():
            i = assistant.rfind(text)
            if i > cut:
                cut, cut_text = i, text
        if last not in self.stop_texts:  # cut short (length, stop string): close the turn
            return (assistant[cut:] if cut >= 0 else "") + tail
        sampled = self.stop_texts[last]
        if cut >= 0 and cut_text == sampled:
            return assistant[cut + len(sampled) :] + tail
        if cut < 0 and tail.startswith(sampled):
            # templates that end a turn by opening the next one (GLM): the sampled stop
            # token is the first token of the tail
            return tail[len(sampled) :]
        log.debug("sampled stop %r is rendered as %r: history rewritten", sampled, cut_text)
        return None


def window(
    history: list[dict[str, Any]], new: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A short stand-in for a long conversation: the leading system messages, the last
    user message before the recent turns (templates key reasoning display on it), and the
    history from the assistant message before our last one onwards."""
    n_sys = 0
    while n_sys < len(history) and history[n_sys].get("role") == "system":
        n_sys += 1
    # searched from the end with list methods: a long tool session has its only user
    # message at the start, and this runs every turn
    roles = [m.get("role") for m in history]
    before_last = roles[n_sys : len(roles) - 1]
    if "assistant" not in before_last:
        return history, new
    start = n_sys + len(before_last) - 1 - before_last[::-1].index("assistant")
    earlier = roles[n_sys:start]
    if "user" in earlier:
        anchor = [history[n_sys + len(earlier) - 1 - earlier[::-1].index("user")]]
    else:
        anchor = []
    return history[:n_sys] + anchor + history[start:], new


def canonical_tools(tools: list[dict[str, Any]] | None) -> str:
    """A stable key for a tool list (for matching turns)."""
    return json.dumps(tools or [], sort_keys=True, ensure_ascii=False)
