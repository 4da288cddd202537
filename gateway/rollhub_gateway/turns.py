"""The seam between the gateway's HTTP layer and its token path.

The HTTP layer (protocol adapters for OpenAI chat, OpenAI responses and Anthropic messages)
turns every request into a neutral :class:`ChatTurn`: OpenAI-style chat messages and
OpenAI-style function tools. The token path renders it to prompt ids (with token-in /
token-out continuity), parses sampled ids back into text, reasoning and tool calls, and
records the turn in the session's trajectory before the response is returned.

Neutral message format (OpenAI chat): ``{"role": "system"|"user"|"assistant"|"tool",
"content": str | None, "tool_calls": [{"id", "type": "function", "function": {"name",
"arguments": <JSON text>}}], "tool_call_id": str, "reasoning_content": str}``.
Neutral tool format: ``{"type": "function", "function": {"name", "description",
"parameters"}}``.

Additions since the first version (all optional for callers, implemented by
:mod:`rollhub_gateway.chat_model`):

- ``ChatModel.new_parser(prepared=None)``: pass the :class:`PreparedTurn` being sampled so
  the parser knows whether that prompt already opened a reasoning block (DeepSeek-R1,
  Qwen3.5 thinking templates; not after DeepSeek's tool outputs). Without it the
  template's usual generation prompt decides.
- ``Conversation.finish()`` marks the session done in the journal and returns its records;
  ``Conversation.discard()`` drops it. ``ChatModel.new_conversation(sid)`` resumes a
  session the journal holds (a gateway restart); ``ChatModel.open_sessions()`` lists them.
- ``StreamingParser`` contract: the concatenated ``content`` deltas are always a prefix of
  ``finish().content`` (tool-call markup and trailing whitespace are held back; when a
  tool call turns out ill-formed its markup is the rest of ``content``), and the
  ``reasoning`` deltas concatenate to ``finish().reasoning``.
- :func:`rollhub_gateway.trajectory.global_drift_counts` gives process-wide drift counts
  for ``/metrics``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias

from rollhub.sampling import Generation
from rollhub.trace import DriftKind, TraceRecord

__all__ = [
    "ChatModel",
    "ChatTurn",
    "Conversation",
    "OutputDelta",
    "ParsedOutput",
    "PreparedTurn",
    "StreamingParser",
    "ToolCall",
    "ToolChoice",
]

#: a neutral ``tool_choice``: ``"none"``, ``"auto"``, ``"required"`` or
#: ``{"type": "function", "function": {"name": ...}}``; None when the call sets none
ToolChoice: TypeAlias = "str | dict[str, Any] | None"


@dataclass(frozen=True)
class ToolCall:
    """One tool call the model made."""

    id: str
    name: str
    arguments: str  # JSON text, exactly as the model wrote it (after normalisation)


@dataclass(frozen=True)
class ParsedOutput:
    """Sampled ids read back as an assistant message."""

    content: str
    reasoning: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    ill_formed: bool = False  # tool-call markup present but unparseable: returned as text


@dataclass(frozen=True)
class OutputDelta:
    """Text that can be streamed to the caller as soon as it is known."""

    kind: Literal["content", "reasoning"]
    text: str


class StreamingParser(Protocol):
    """Incremental parser of one generation."""

    def feed(self, token_ids: list[int]) -> list[OutputDelta]:
        """Consume newly sampled ids; return text that is safe to stream now."""
        ...

    def finish(self) -> ParsedOutput:
        """The whole output, tool calls included, once generation ended."""
        ...


@dataclass(frozen=True)
class ChatTurn:
    """One model call in neutral form."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    tool_choice: ToolChoice = None
    #: the policy serving the call (several policies): its turns continue only its own
    policy: str | None = None


@dataclass(frozen=True)
class PreparedTurn:
    """A rendered prompt, ready for the sampling backend."""

    prompt_ids: list[int]
    drift: DriftKind
    turn_index: int
    #: token path's private state for :meth:`Conversation.commit`
    state: Any = None


class ChatModel(Protocol):
    """The model card of a gateway: tokenizer, template family, stop ids, parser factory."""

    model_id: str
    family: str

    def supports_tools(self) -> bool:
        """Whether the chat template can render tools and the parser can read calls."""
        ...

    def stop_token_ids(self) -> list[int]:
        """Ids that end a turn (EOS, end-of-turn markers)."""
        ...

    def count_tokens(self, turn: ChatTurn) -> int:
        """Prompt tokens of a turn rendered from scratch (Anthropic count_tokens)."""
        ...

    def new_parser(self, prepared: PreparedTurn | None = None) -> StreamingParser:
        """A parser for one generation (``prepared``: the turn being sampled, optional)."""
        ...

    def new_conversation(self, session_id: str) -> Conversation:
        """Per-session trajectory state; resumed from the journal if it holds the session."""
        ...


class Conversation(Protocol):
    """One session's trajectory: renders turns with continuity and records them."""

    session_id: str

    def prepare(self, turn: ChatTurn) -> PreparedTurn:
        """Render a turn's prompt ids, reusing previous ids when the history extends them.

        :raises GatewayError: tools given to a template family that cannot render them
            (before anything is sampled), naming the config override.
        """
        ...

    def commit(
        self,
        prepared: PreparedTurn,
        generation: Generation,
        parsed: ParsedOutput,
        *,
        weight_version: int | None = None,
    ) -> DriftKind | None:
        """Record a sampled turn (journal write included) before the response is sent.

        Returns the drift as committed (None: as prepared); a concurrent turn that
        committed first can turn a prepared ``append`` into a ``fork``.
        """
        ...

    def traces(self) -> list[TraceRecord]:
        """The session's linearised records, one per branch."""
        ...

    def drift_counts(self) -> dict[str, int]:
        """Counts of append / rerender / fork turns and masked tokens."""
        ...

    def finish(self) -> list[TraceRecord]:
        """Close the session (journal: done) and return its records."""
        ...

    def discard(self) -> None:
        """Drop the session and its journal entries."""
        ...
