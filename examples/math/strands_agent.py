"""The math agent written with Strands Agents.

The model comes from ``rollhub_frameworks.strands_model`` (the rollout's endpoint, model and
sampling); the calculator is a Strands ``@tool``. Strands' OpenAI provider streams every
request; the gateway records streamed turns like any other.

    rollhub run examples/math/strands.toml
"""

from __future__ import annotations

from typing import Any

from agent import SYSTEM_PROMPT, MathTask, calculator_text, extract_answer, reward
from conversation import from_strands
from rollhub.app import RolloutApp, RolloutContext
from rollhub_frameworks import strands_model
from strands import Agent, tool
from strands.types.exceptions import MaxTokensReachedException

app = RolloutApp()


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression: + - * / // % ** and parentheses, plus sqrt(x),
    abs(x), round(x, n), min(...), max(...).

    Args:
        expression: e.g. (12 + 7) * 3
    """
    return calculator_text(expression)


@app.rollout_entrypoint
def math_agent(payload: dict[str, Any], context: RolloutContext) -> dict[str, Any]:
    """Validate the payload, build the Strands agent from ``_rollout``, solve."""
    task = MathTask.model_validate(payload)
    assert context.rollout is not None
    agent = Agent(
        model=strands_model(context.rollout),
        tools=[calculator],
        system_prompt=SYSTEM_PROMPT,
        callback_handler=None,
    )
    try:
        answer = agent(task.question)
        text, stop_reason = str(answer), answer.stop_reason
    except MaxTokensReachedException:
        # A reply cut at max_tokens is a wrong answer for training, not a crashed rollout.
        text, stop_reason = None, "max_tokens"
    predicted = extract_answer(text)
    tool_calls = sum(
        1 for m in agent.messages for block in m.get("content", []) if "toolUse" in block
    )
    result: dict[str, Any] = {
        "rewards": reward(predicted, task.answer),
        "answer": predicted,
        "final_message": text,
        "metrics": {"tool_calls": tool_calls, "stop_reason": stop_reason},
    }
    if payload.get("capture_messages"):
        result["messages"] = from_strands(agent.messages, SYSTEM_PROMPT)
    return result


if __name__ == "__main__":
    app.run()
