"""An agent's tool loop over raw HTTP, as SDKs write one: each reply is sent back without
its null fields, followed by its tool result; and an engine that samples the same tool
call every turn."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aiohttp
from rollhub.sampling import Generation, SamplingBackend

#: a long system prompt, so the shared-prefix and window paths have something to share
SYSTEM = {"role": "system", "content": "You answer with tools. " * 20}


async def tool_session(
    url: str, key: str, turns: int, tool: dict[str, Any]
) -> list[dict[str, Any]]:
    """``turns`` chat calls to the gateway at ``url``, each answering the previous tool call;
    returns the conversation as the agent holds it after the last reply."""
    messages: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "weather?"}]
    async with aiohttp.ClientSession() as http:
        for i in range(turns):
            async with http.post(
                f"{url}/v1/chat/completions",
                json={"model": "m", "messages": messages, "tools": [tool]},
                headers={"Authorization": f"Bearer {key}"},
            ) as r:
                body = await r.json()
                assert r.status == 200, body
            msg = {k: v for k, v in body["choices"][0]["message"].items() if v is not None}
            call_id = msg["tool_calls"][0]["id"]
            messages += [msg, {"role": "tool", "tool_call_id": call_id, "content": f"{i} C"}]
    return messages


class RepeatEngine(SamplingBackend):
    """Samples ``out`` every turn, with logprob ``logprob(i)`` at position ``i``."""

    name = "repeat"

    def __init__(self, out: list[int], logprob: Callable[[int], float]) -> None:
        super().__init__()
        self.out = out
        self.logprobs = [logprob(i) for i in range(len(out))]

    async def generate(self, prompt_ids: Any, params: Any, *, turn: Any = None) -> Generation:
        return Generation(list(self.out), list(self.logprobs), "stop")
