"""Wire formats of the gateway: requests in, neutral turns out, and the answers back.

- :mod:`.openai_chat_input`, :mod:`.openai_responses_input`, :mod:`.anthropic_input`: a
  request body → :class:`WireRequest` (field readers in :mod:`.fields`; the previous call's
  re-sent prefix in :mod:`.known_prefix`)
- :mod:`.openai_chat`, :mod:`.openai_responses`, :mod:`.anthropic`: a finished or streamed
  turn → the format's response, stream events and errors (text blocks of a stream in
  :mod:`.text_blocks`, logprob texts in :mod:`.logprob_texts`)
- :mod:`.base`: what every format shares (errors, requests, results, stream events)
- :mod:`.admin`: the session-management routes of the hub
"""

from typing import TypeAlias

from rollhub_gateway.protocols.anthropic import AnthropicMessages
from rollhub_gateway.protocols.base import TurnResult, WireError, WireRequest
from rollhub_gateway.protocols.openai_chat import OpenAIChat
from rollhub_gateway.protocols.openai_responses import OpenAIResponses

#: one of the three wire formats (what the model routes parse and answer with)
WireAdapter: TypeAlias = AnthropicMessages | OpenAIChat | OpenAIResponses

__all__ = [
    "AnthropicMessages",
    "OpenAIChat",
    "OpenAIResponses",
    "TurnResult",
    "WireAdapter",
    "WireError",
    "WireRequest",
]
