"""The math agent on the plain ``openai`` SDK, async (``AsyncOpenAI``).

Same tool loop, reward and payload as ``agent.py`` (the sync version); the handler is an
``async def``, so the app runs it on its event loop instead of a thread.

    rollhub run examples/math/openai_async.toml
"""

from __future__ import annotations

from typing import Any

from agent import (
    CALCULATOR_TOOL,
    SYSTEM_PROMPT,
    MathTask,
    extract_answer,
    reward,
    run_tool,
    split_sampling,
)
from openai import AsyncOpenAI
from rollhub.app import RolloutApp, RolloutContext

app = RolloutApp()


async def solve(
    client: AsyncOpenAI, model: str, task: MathTask, sampling: dict[str, Any]
) -> dict[str, Any]:
    """Run the tool loop for one problem; return the scored result and the conversation."""
    direct, extra = split_sampling(sampling)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": task.question},
    ]
    final_text, turns, tool_calls = None, 0, 0
    while turns < task.max_turns:
        turns += 1
        response = await client.chat.completions.create(
            model=model, messages=messages, tools=[CALCULATOR_TOOL], extra_body=extra or None,
            **direct,
        )  # fmt: skip
        message = response.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            final_text = message.content
            break
        for call in message.tool_calls:
            tool_calls += 1
            output = run_tool(call.function.name, call.function.arguments)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
    predicted = extract_answer(final_text)
    return {
        "rewards": reward(predicted, task.answer),
        "answer": predicted,
        "turns": turns,
        "final_message": final_text,
        "metrics": {"tool_calls": tool_calls, "answered": final_text is not None},
        "messages": messages,
    }


@app.rollout_entrypoint
async def math_agent(payload: dict[str, Any], context: RolloutContext) -> dict[str, Any]:
    """Validate the payload, build the client from ``_rollout``, solve."""
    task = MathTask.model_validate(payload)
    rollout = context.rollout
    assert rollout is not None and rollout.base_url and rollout.model_id
    api_key = rollout.api_key.get_secret_value() if rollout.api_key else "EMPTY"
    async with AsyncOpenAI(base_url=rollout.base_url, api_key=api_key) as client:
        result = await solve(client, rollout.model_id, task, rollout.sampling)
    if not payload.get("capture_messages"):
        result.pop("messages")
    return result


if __name__ == "__main__":
    app.run()
