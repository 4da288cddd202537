"""The agent the verl-side tests run in local runtime workers (real HTTP, real openai SDK).

One payload field picks the behaviour, so one worker pool serves every test:

- ``single``: one chat call; reward 1.0 when the reply's answer is the ground truth.
- ``tool``: a calculator tool call, the tool's result, then the answer (3 model turns' worth
  of tokens: call, tool response, answer).
- ``fork``: one call, then a second call on a rewritten history (the system prompt
  changed), which the gateway records as a second trace record.
- ``fail``: raises after one model call (an ``agent_error`` episode).
"""

from __future__ import annotations

import json
import re
from typing import Any

from openai import OpenAI
from rollhub.app import RolloutApp, RolloutContext

app = RolloutApp()

CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    },
}


def _reward(text: str | None, truth: Any) -> float:
    found = re.findall(r"Answer:\s*(-?\d+)", text or "")
    return 1.0 if found and truth is not None and found[-1] == str(truth) else 0.0


@app.rollout_entrypoint
def agent(payload: dict[str, Any], context: RolloutContext) -> dict[str, Any]:
    """Run the behaviour named by ``payload['extra_info']['mode']``."""
    rollout = context.rollout
    assert rollout is not None and rollout.base_url and rollout.model_id
    key = rollout.api_key.get_secret_value() if rollout.api_key else "EMPTY"
    mode = (payload.get("extra_info") or {}).get("mode", "single")
    truth = (payload.get("reward_model") or {}).get("ground_truth")
    messages = list(payload["messages"])
    with OpenAI(base_url=rollout.base_url, api_key=key, max_retries=0) as client:

        def call(msgs: list[dict[str, Any]], **kw: Any) -> Any:
            return client.chat.completions.create(
                model=rollout.model_id, messages=msgs, temperature=0.3, **kw
            ).choices[0]

        if mode == "tool":
            first = call(messages, tools=[CALCULATOR])
            calls = first.message.tool_calls or []
            assert calls, f"expected a tool call, got {first.message.content!r}"
            messages.append(first.message.model_dump(exclude_none=True))
            left, right = json.loads(calls[0].function.arguments)["expression"].split("*")
            result = str(int(left) * int(right))
            messages.append({"role": "tool", "tool_call_id": calls[0].id, "content": result})
            final = call(messages, tools=[CALCULATOR]).message.content
            return {"rewards": _reward(final, truth), "final": final}
        first = call(messages)
        if mode == "fail":
            raise RuntimeError("the agent failed on purpose")
        if mode == "fork":
            rewritten = [{"role": "system", "content": "Be brief."}, *messages[1:]]
            rewritten.append({"role": "assistant", "content": first.message.content})
            rewritten.append({"role": "user", "content": "Say it again."})
            final = call(rewritten).message.content
            return {"rewards": _reward(final, truth), "final": final}
        return {"rewards": _reward(first.message.content, truth), "final": first.message.content}
