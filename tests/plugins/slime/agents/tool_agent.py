"""A small tool-using agent for the slime end-to-end tests.

The payload's ``mode`` picks its behaviour: ``tool`` (one ``add`` tool call, then an
answer), ``plain`` (answer at once), ``fork`` (answer, then ask again with a rewritten
history, which forks the capture session) and ``fail`` (raise before any model call).
The reward is 1.0 when the final message contains the payload's ``label``.
"""

from __future__ import annotations

import json
from typing import Any

from openai import OpenAI
from rollhub.app import RolloutApp, RolloutContext

app = RolloutApp()

ADD_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}


@app.rollout_entrypoint
def tool_agent(payload: dict[str, Any], context: RolloutContext) -> dict[str, Any]:
    """Run the mode's conversation through the rollout's model endpoint."""
    mode = payload.get("mode", "plain")
    if mode == "fail":
        raise RuntimeError(f"agent failed on purpose for {payload.get('id')}")
    rollout = context.rollout
    assert rollout is not None and rollout.base_url and rollout.model_id
    key = rollout.api_key.get_secret_value() if rollout.api_key else "EMPTY"
    sampling = {k: v for k, v in rollout.sampling.items() if k in ("temperature", "max_tokens")}
    messages: list[dict[str, Any]] = [{"role": "user", "content": payload["prompt"]}]
    with OpenAI(base_url=rollout.base_url, api_key=key, max_retries=0) as client:

        def call(history: list[dict[str, Any]]) -> Any:
            reply = client.chat.completions.create(
                model=rollout.model_id, messages=history, tools=[ADD_TOOL], **sampling
            )
            return reply.choices[0]

        choice = call(messages)
        turns = 1
        if choice.message.tool_calls:
            tool_call = choice.message.tool_calls[0]
            args = json.loads(tool_call.function.arguments)
            messages.append(choice.message.model_dump(exclude_none=True))
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": tool_call.id,
                    "content": str(args["a"] + args["b"]),
                }
            )
            choice, turns = call(messages), turns + 1
        if mode == "fork":
            # a compacted history: the earlier answer is summarised, not replayed
            summary = [{"role": "user", "content": f"Summary so far: {choice.message.content}"}]
            choice, turns = call(summary), turns + 1
    final = choice.message.content or ""
    label = str(payload.get("label", ""))
    return {
        "rewards": 1.0 if label and label in final else 0.0,
        "final_message": final,
        "finish_reason": choice.finish_reason,
        "turns": turns,
    }
