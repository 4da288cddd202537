"""A scripted, stateless OpenAI-compatible chat-completions server for pipeline tests.

Each conversation is matched to a script by a marker string in its first user message; the
next step is the number of assistant messages already in the conversation. Step ``i`` of a
script is a tool call (``(name, arguments)``); past the end the model answers with text. So
concurrent rollouts, in any worker process, each get their own script without the server
keeping per-session state, exactly as a real endpoint sees them: one HTTP request per turn.

::

    model = ScriptedChatModel({"median()": [("read_file", {"path": "stats.py"})]})
    with serve_app(model.app) as url:   # rollhub.testing.servers.serve_app
        ...  # point the agent at f"{url}/v1"
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

__all__ = ["ChatRequest", "ScriptedChatModel", "ToolStep"]

#: one scripted tool call: the tool name and its JSON arguments
ToolStep = tuple[str, dict[str, Any]]


@dataclass(frozen=True)
class ChatRequest:
    """One chat-completions request as the server received it."""

    body: dict[str, Any]
    authorization: str | None
    script: str | None = None
    step: int = 0

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The request's conversation."""
        return list(self.body.get("messages", []))


@dataclass
class ScriptedChatModel:
    """Replays tool calls chosen by the conversation's first user message.

    :param scripts: marker substring of the first user message -> tool steps.
    :param answer: the final text answer, sent once a script is exhausted.
    """

    scripts: Mapping[str, Sequence[ToolStep]]
    answer: str = "Done."
    requests: list[ChatRequest] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.app = Starlette(routes=[
            Route("/v1/chat/completions", self._chat, methods=["POST"]),
        ])

    def requests_for(self, marker: str) -> list[ChatRequest]:
        """The recorded requests of conversations matched to ``marker``."""
        with self._lock:
            return [r for r in self.requests if r.script == marker]

    def _match(self, messages: list[dict[str, Any]]) -> str | None:
        first_user = next((m for m in messages if m.get("role") == "user"), None)
        text = str(first_user.get("content") or "") if first_user else ""
        found = [marker for marker in self.scripts if marker in text]
        return found[0] if len(found) == 1 else None

    async def _chat(self, request: Request) -> JSONResponse:
        body = await request.json()
        messages = body.get("messages") or []
        marker = self._match(messages)
        step = sum(1 for m in messages if m.get("role") == "assistant")
        with self._lock:
            self.requests.append(ChatRequest(body, request.headers.get("authorization"),
                                             marker, step))
        if marker is None:
            # A conversation no script claims is a test bug: fail the agent's call loudly,
            # in the error shape the openai SDK parses.
            return JSONResponse(
                {"error": {"message": "no script matches this conversation",
                           "type": "invalid_request_error", "code": None, "param": "messages"}},
                status_code=400,
            )
        script = self.scripts[marker]
        if step < len(script):
            name, args = script[step]
            call = {"id": f"call_{step}", "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)}}
            message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call]}
            finish = "tool_calls"
        else:
            message, finish = {"role": "assistant", "content": self.answer}, "stop"
        return JSONResponse({
            "id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": 0,
            "model": body.get("model", ""),
            "choices": [{"index": 0, "message": message, "finish_reason": finish,
                         "logprobs": None}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        })
