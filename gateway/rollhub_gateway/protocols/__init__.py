"""Wire formats of the gateway: each turns its requests into neutral turns and back.

- :mod:`.openai_chat`: OpenAI Chat Completions
- :mod:`.openai_responses`: OpenAI Responses
- :mod:`.openai_responses_input`: the Responses request fields (``input``, tools)
- :mod:`.anthropic`: Anthropic Messages
- :mod:`.execution`: running one turn (policy, rendering, sampling, commit), shared by all
- :mod:`.admin`: the session-management routes of the hub
"""

from rollhub_gateway.protocols.anthropic import AnthropicMessages
from rollhub_gateway.protocols.base import TurnResult, WireError, WireRequest
from rollhub_gateway.protocols.openai_chat import OpenAIChat
from rollhub_gateway.protocols.openai_responses import OpenAIResponses

__all__ = [
    "AnthropicMessages",
    "OpenAIChat",
    "OpenAIResponses",
    "TurnResult",
    "WireError",
    "WireRequest",
]
