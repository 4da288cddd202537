"""The math agent on the plain ``anthropic`` SDK (Messages API with a ``tool_use`` loop).

The rollhub gateway speaks the Anthropic Messages API at its root URL, so the client's
``base_url`` is the rollout's ``base_url`` without its ``/v1`` suffix; the session key
goes in as the api key (sent as ``x-api-key``).

    rollhub run examples/math/anthropic.toml
"""

from __future__ import annotations

import json
from typing import Any

from agent import CALCULATOR_TOOL, SYSTEM_PROMPT, MathTask, extract_answer, reward, run_tool
from anthropic import Anthropic
from conversation import from_anthropic
from rollhub.app import RolloutApp, RolloutContext

app = RolloutApp()

TOOL = {
    "name": CALCULATOR_TOOL["function"]["name"],
    "description": CALCULATOR_TOOL["function"]["description"],
    "input_schema": CALCULATOR_TOOL["function"]["parameters"],
}
# Sampling keys this SDK takes as keywords; the rest (temperature, top_p, top_k, which
# recent SDK releases no longer list) travel in extra_body, into the same request body.
_ANTHROPIC_SAMPLING = {"stop_sequences"}


def solve(client: Anthropic, model: str, task: MathTask, sampling: dict[str, Any]) -> dict:
    """Run the tool loop for one problem; return the scored result and the history."""
    sampling = dict(sampling)
    max_tokens = int(sampling.pop("max_tokens", 512))
    direct = {k: v for k, v in sampling.items() if k in _ANTHROPIC_SAMPLING}
    extra = {k: v for k, v in sampling.items() if k not in _ANTHROPIC_SAMPLING}
    messages: list[dict[str, Any]] = [{"role": "user", "content": task.question}]
    final_text, turns, tool_calls = None, 0, 0
    while turns < task.max_turns:
        turns += 1
        reply = client.messages.create(
            model=model, system=SYSTEM_PROMPT, messages=messages, tools=[TOOL],
            max_tokens=max_tokens, extra_body=extra or None, **direct,
        )  # fmt: skip
        blocks = [block.model_dump(exclude_none=True) for block in reply.content]
        messages.append({"role": "assistant", "content": blocks})
        uses = [block for block in reply.content if block.type == "tool_use"]
        if not uses:
            final_text = "".join(block.text for block in reply.content if block.type == "text")
            break
        results = []
        for use in uses:
            tool_calls += 1
            output = run_tool(use.name, json.dumps(use.input))
            results.append({"type": "tool_result", "tool_use_id": use.id, "content": output})
        messages.append({"role": "user", "content": results})
    predicted = extract_answer(final_text)
    return {
        "rewards": reward(predicted, task.answer),
        "answer": predicted,
        "turns": turns,
        "final_message": final_text,
        "metrics": {"tool_calls": tool_calls, "answered": final_text is not None},
        "messages": from_anthropic(SYSTEM_PROMPT, messages),
    }


@app.rollout_entrypoint
def math_agent(payload: dict[str, Any], context: RolloutContext) -> dict[str, Any]:
    """Validate the payload, build the client from ``_rollout``, solve."""
    task = MathTask.model_validate(payload)
    rollout = context.rollout
    assert rollout is not None and rollout.base_url and rollout.model_id
    api_key = rollout.api_key.get_secret_value() if rollout.api_key else "EMPTY"
    base_url = rollout.base_url.rstrip("/").removesuffix("/v1")
    with Anthropic(base_url=base_url, api_key=api_key, max_retries=2) as client:
        result = solve(client, rollout.model_id, task, rollout.sampling)
    if not payload.get("capture_messages"):
        result.pop("messages")
    return result


if __name__ == "__main__":
    app.run()
