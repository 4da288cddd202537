"""The shape of a template family: how its chat template wants messages, and how its
sampled text splits into reasoning, content and tool calls.

A family is stateless and shared by every session of a model. Parsing works on the text
of the sampled ids (special tokens kept, the final stop id removed), so the same code
serves whole outputs (:meth:`Family.parse`) and streams (:class:`MarkupStreamParser`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any, ClassVar, Literal, Protocol

from rollhub_gateway.chat_templates.environment import FrozenJson
from rollhub_gateway.turns import OutputDelta, ParsedOutput, StreamingParser, ToolCall
from rollhub_gateway.unique_ids import unique_id

log = logging.getLogger(__name__)

__all__ = ["Family", "IncrementalDecoder", "MarkupStreamParser", "new_call_id", "partial_suffix"]


def new_call_id() -> str:
    """A fresh OpenAI-style tool call id."""
    return unique_id("call_")


def partial_suffix(text: str, markers: tuple[str, ...]) -> int:
    """Length of the longest tail of ``text`` that is a proper prefix of some marker."""
    best = 0
    for marker in markers:
        for n in range(min(len(marker) - 1, len(text)), best, -1):
            if text.endswith(marker[:n]):
                best = n
                break
    return best


def json_arguments(value: object) -> str:
    """Arguments as compact JSON text (the neutral format carries JSON text)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


class Family:
    """A template family. Subclasses set the class attributes and the tool-section parser.

    Attributes:
        name: config word (``family = "hermes"``).
        supports_tools: whether tools can be rendered and calls parsed.
        reasoning_markup: ``(open, close)`` around reasoning in the output, or ``None``.
        tool_markers: strings that open the tool-call section of an output.
        arguments_as_text: the template concatenates ``arguments`` as a string (DeepSeek)
            instead of serialising a mapping.
    """

    name: ClassVar[str] = "base"
    supports_tools: ClassVar[bool] = True
    reasoning_markup: ClassVar[tuple[str, str] | None] = None
    tool_markers: ClassVar[tuple[str, ...]] = ()
    arguments_as_text: ClassVar[bool] = False
    #: an assistant message may hold text next to its tool calls
    content_with_calls: ClassVar[bool] = True
    #: an assistant message with tool calls and no text keeps ``content: None`` (the OpenAI
    #: form): DeepSeek-R1's template renders the calls only when the content is none
    none_content_with_calls: ClassVar[bool] = False
    #: tokens that end an assistant turn (the tokenizer's EOS is added to these)
    stop_tokens: ClassVar[tuple[str, ...]] = ("<|im_end|>", "<|endoftext|>")
    #: extra keyword arguments for ``apply_chat_template``
    template_kwargs: ClassVar[dict[str, Any]] = {}
    #: reasoning comes in messages of its own (channels, recipients), not in markup
    reasoning_messages: ClassVar[bool] = False
    #: the template never reads ``tool_calls``: the model's calls are part of its text
    calls_in_content: ClassVar[bool] = False

    @property
    def has_reasoning(self) -> bool:
        """Whether an output may carry reasoning (markup or a message of its own)."""
        return self.reasoning_markup is not None or self.reasoning_messages

    # Rendering -------------------------------------------------------------------------------

    def to_template_message(self, message: dict[str, Any]) -> dict[str, Any]:
        """A neutral message in the form this family's template reads."""
        out = {k: v for k, v in message.items() if v is not None or k == "content"}
        content = out.get("content")
        if isinstance(content, list):
            out["content"] = "".join(
                p.get("text", "") if isinstance(p, dict) else str(p) for p in content
            )
        if not out.get("content") and not (self.none_content_with_calls and out.get("tool_calls")):
            out["content"] = out.get("content") or ""
        elif not out.get("content"):
            out["content"] = None
        reasoning = out.pop("reasoning_content", None)
        if reasoning is not None and message.get("role") == "assistant":
            # both names, as transformers aliases them: Qwen/GLM read reasoning_content,
            # GPT-OSS reads thinking
            out["thinking"] = out["reasoning_content"] = reasoning
        if out.get("tool_calls"):
            calls = []
            for call in out["tool_calls"]:
                # the call and its function are copied (their fields change below); the
                # rest is shared with the neutral message, which no one changes
                call = dict(call)
                fn = call["function"] = dict(call.get("function") or {})
                args = fn.get("arguments")
                if self.arguments_as_text:
                    fn["arguments"] = json_arguments(args) if args is not None else "{}"
                elif isinstance(args, str):
                    try:
                        value = json.loads(args) if args.strip() else {}
                        # a fresh object no one changes: a template dumps it once
                        fn["arguments"] = FrozenJson(value) if type(value) is dict else value
                    except ValueError:
                        fn["arguments"] = args
                call.setdefault("type", "function")
                calls.append(call)
            out["tool_calls"] = calls
        else:
            out.pop("tool_calls", None)
        return out

    def assistant_message(self, parsed: ParsedOutput) -> dict[str, Any]:
        """The neutral assistant message a parsed output becomes."""
        msg: dict[str, Any] = {"role": "assistant", "content": parsed.content}
        if parsed.reasoning is not None:
            msg["reasoning_content"] = parsed.reasoning
        if parsed.tool_calls:
            msg["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in parsed.tool_calls
            ]
        return msg

    # What the model writes ---------------------------------------------------------------------

    def format_output(
        self,
        content: str,
        *,
        reasoning: str | None = None,
        tool_calls: Sequence[tuple[str, dict[str, Any]]] = (),
        in_reasoning: bool = False,
    ) -> str:
        """The text a model of this family samples for an answer (stop token excluded).

        Used by scripted engines and the conformance run to produce the family's exact
        markup; :meth:`parse` reads it back.
        """
        head = ""
        if reasoning is not None and self.reasoning_markup:
            open_, close = self.reasoning_markup
            head = ("" if in_reasoning else open_ + "\n") + reasoning + "\n" + close + "\n\n"
        calls = "".join(
            self.format_call(name, args, i) for i, (name, args) in enumerate(tool_calls)
        )
        sep = "\n" if content and calls else ""
        return head + content + sep + calls

    def format_call(self, name: str, args: dict[str, Any], index: int) -> str:
        """One tool call in this family's markup."""
        raise NotImplementedError(f"family {self.name!r} has no tool-call markup")

    # Parsing ---------------------------------------------------------------------------------

    def parse(self, text: str, *, in_reasoning: bool = False) -> ParsedOutput:
        """Split a whole output into reasoning, content and tool calls.

        :param text: the decoded sampled ids, special tokens kept, stop id removed.
        :param in_reasoning: the generation prompt already opened the reasoning block.
        """
        reasoning, rest = self.split_reasoning(text, in_reasoning=in_reasoning)
        if not self.supports_tools:
            return ParsedOutput(content=rest, reasoning=reasoning)
        start = self.tool_section_start(rest)
        if start is None:
            return ParsedOutput(content=rest, reasoning=reasoning)
        section = rest[start:]
        try:
            calls = self.parse_tool_section(section)
        except (ValueError, KeyError, TypeError) as exc:
            log.debug("ill-formed tool section (%s): %r", exc, section[:200])
            calls = None
        if not calls:
            return ParsedOutput(content=rest, reasoning=reasoning, ill_formed=calls is None)
        return ParsedOutput(content=rest[:start].rstrip(), reasoning=reasoning, tool_calls=calls)

    def split_reasoning(self, text: str, *, in_reasoning: bool) -> tuple[str | None, str]:
        """``(reasoning, rest)``; reasoning is ``None`` when the output has none."""
        if self.reasoning_markup is None:
            return None, text
        open_, close = self.reasoning_markup
        body = text
        if not in_reasoning:
            stripped = text.lstrip()
            if not stripped.startswith(open_):
                return None, text
            body = stripped[len(open_) :]
        end = body.find(close)
        if end < 0:
            return body.strip("\n"), ""
        return body[:end].strip("\n"), body[end + len(close) :].lstrip("\n")

    def tool_section_start(self, text: str) -> int | None:
        """Offset where the tool-call section begins, or ``None``."""
        found = [i for i in (text.find(m) for m in self.tool_markers) if i >= 0]
        return min(found) if found else None

    def parse_tool_section(self, section: str) -> list[ToolCall] | None:
        """Tool calls of a section that starts with a tool marker; ``None`` if ill-formed."""
        raise NotImplementedError

    # Streaming -------------------------------------------------------------------------------

    def new_stream_parser(
        self, decoder: IncrementalDecoder, *, in_reasoning: bool
    ) -> StreamingParser:
        """A :class:`~rollhub_gateway.turns.StreamingParser` for one generation."""
        return MarkupStreamParser(self, decoder, in_reasoning=in_reasoning)


class TextDecoder(Protocol):
    """What :class:`IncrementalDecoder` decodes with: a Hugging Face tokenizer's ``decode``
    returning one string (a :class:`~rollhub_gateway.token_codec.TokenCodec`)."""

    def decode(
        self, ids: list[int], *, skip_special_tokens: bool, clean_up_tokenization_spaces: bool
    ) -> str:
        """The text of ``ids``."""
        ...


class IncrementalDecoder:
    """Detokenises a growing id list without re-decoding it whole on every step.

    Decodes a short window before the newest ids and keeps only the new text; text that
    ends in an incomplete UTF-8 sequence (``\\ufffd``) is held until the next ids arrive.
    """

    def __init__(self, tokenizer: TextDecoder, stop_ids: set[int]) -> None:
        self._tok = tokenizer
        self._stop = stop_ids
        self.stop = stop_ids
        self.ids: list[int] = []
        self._prefix = 0
        self._read = 0
        self.text = ""

    def _decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def feed(self, token_ids: list[int]) -> str:
        """Add ids; return the text they complete."""
        out = []
        for t in token_ids:
            self.ids.append(t)
            if t in self._stop:
                continue
            window = [i for i in self.ids[self._prefix :] if i not in self._stop]
            prev = [i for i in self.ids[self._prefix : self._read] if i not in self._stop]
            prefix_text = self._decode(prev)
            new_text = self._decode(window)
            if len(new_text) > len(prefix_text) and not new_text.endswith("\ufffd"):
                delta = new_text[len(prefix_text) :]
                out.append(delta)
                self._prefix = self._read
                self._read = len(self.ids)
        text = "".join(out)
        self.text += text
        return text

    def final_text(self) -> str:
        """The whole output text (stop ids removed), incomplete tails included."""
        return self._decode([i for i in self.ids if i not in self._stop])


class MarkupStreamParser:
    """Streams reasoning and content; holds back partial markers and the tool section."""

    def __init__(self, family: Family, decoder: IncrementalDecoder, *, in_reasoning: bool) -> None:
        self.family = family
        self.decoder = decoder
        self.in_reasoning = in_reasoning
        self._buf = ""
        self._pos = 0
        markup = family.reasoning_markup
        self._open, self._close = markup if markup is not None else ("", "")
        # without markup there is no reasoning block to be in, as parse() reads the output
        in_block = in_reasoning and markup is not None
        self._state = (
            "start" if markup and not in_reasoning else ("reasoning" if in_block else "content")
        )
        self._skip_newlines = in_block
        self._sent_content = ""

    def feed(self, token_ids: list[int]) -> list[OutputDelta]:
        """Consume ids; return text that is safe to show now."""
        self._buf += self.decoder.feed(token_ids)
        return self._advance()

    def _advance(self) -> list[OutputDelta]:
        out: list[OutputDelta] = []
        fam = self.family
        while True:
            rest = self._buf[self._pos :]
            if self._state == "start":
                open_ = self._open
                stripped = rest.lstrip()
                if stripped.startswith(open_):
                    self._pos += len(rest) - len(stripped) + len(open_)
                    self._state, self._skip_newlines = "reasoning", True
                    continue
                if not stripped or open_.startswith(stripped):
                    return out
                self._state = "content"
                continue
            if self._state == "reasoning":
                if self._skip_newlines:
                    stripped = rest.lstrip("\n")
                    self._pos += len(rest) - len(stripped)
                    rest = stripped
                    if not rest:
                        return out
                    self._skip_newlines = False
                close = self._close
                end = rest.find(close)
                if end >= 0:
                    self._emit(out, "reasoning", rest[:end].rstrip("\n"))
                    self._pos += end + len(close)
                    self._state, self._skip_newlines = "content", True
                    continue
                keep = partial_suffix(rest, (close,))
                safe = rest[: len(rest) - keep]
                safe = safe.rstrip("\n")  # trailing newlines before </think> are stripped
                self._emit(out, "reasoning", safe)
                self._pos += len(safe)
                return out
            if self._state == "content":
                if self._skip_newlines:
                    stripped = rest.lstrip("\n")
                    self._pos += len(rest) - len(stripped)
                    rest = stripped
                    if not rest:
                        return out
                    self._skip_newlines = False
                start = fam.tool_section_start(rest) if fam.supports_tools else None
                if start is not None:
                    self._emit(out, "content", rest[:start].rstrip())
                    self._pos += start
                    self._state = "tool"
                    return out
                keep = partial_suffix(rest, fam.tool_markers) if fam.supports_tools else 0
                safe = rest[: len(rest) - keep]
                safe = safe[: len(safe.rstrip())]  # trailing space may precede a tool call
                self._emit(out, "content", safe)
                self._pos += len(safe)
                return out
            return out  # tool section: held until finish()

    def _emit(
        self, out: list[OutputDelta], kind: Literal["content", "reasoning"], text: str
    ) -> None:
        if text:
            out.append(OutputDelta(kind, text))
            if kind == "content":
                self._sent_content += text

    def finish(self) -> ParsedOutput:
        """The whole output, parsed from the full text."""
        text = self.decoder.final_text()
        in_reasoning = self.in_reasoning
        markup = self.family.reasoning_markup
        ids = self.decoder.ids
        if (
            in_reasoning
            and markup
            and markup[1] not in text
            and ids
            and ids[-1] in self.decoder.stop
        ):
            # the model ended its turn without ever closing a reasoning block: the prompt
            # did not open one (e.g. DeepSeek after tool outputs), so it is content
            in_reasoning = False
        return self.family.parse(text, in_reasoning=in_reasoning)
