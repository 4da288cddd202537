"""The math agent written with LangGraph (``create_react_agent``).

The chat model comes from ``rollhub_frameworks.langgraph_chat_model`` (the rollout's
endpoint, model and sampling); the calculator is a LangChain ``@tool``.

    rollhub run examples/math/langgraph.toml
"""

from __future__ import annotations

import warnings
from typing import Any

from agent import SYSTEM_PROMPT, MathTask, calculator_text, extract_answer, reward
from conversation import from_langchain
from langchain_core.tools import tool
from rollhub.app import RolloutApp, RolloutContext
from rollhub_frameworks import langgraph_chat_model

with warnings.catch_warnings():
    # newer LangGraph releases point create_react_agent at langchain.agents; same graph
    warnings.simplefilter("ignore")
    from langgraph.prebuilt import create_react_agent

app = RolloutApp()


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression: + - * / // % ** and parentheses, plus sqrt(x),
    abs(x), round(x, n), min(...), max(...). Example: (12 + 7) * 3"""
    return calculator_text(expression)


@app.rollout_entrypoint
def math_agent(payload: dict[str, Any], context: RolloutContext) -> dict[str, Any]:
    """Validate the payload, build the graph from ``_rollout``, solve."""
    task = MathTask.model_validate(payload)
    assert context.rollout is not None
    graph = create_react_agent(
        langgraph_chat_model(context.rollout), tools=[calculator], prompt=SYSTEM_PROMPT
    )
    state = graph.invoke(
        {"messages": [("user", task.question)]},
        {"recursion_limit": 2 * task.max_turns + 1},
    )
    messages = state["messages"]
    text = messages[-1].content if isinstance(messages[-1].content, str) else None
    predicted = extract_answer(text)
    result: dict[str, Any] = {
        "rewards": reward(predicted, task.answer),
        "answer": predicted,
        "final_message": text,
        "metrics": {"tool_calls": sum(1 for m in messages if m.type == "tool")},
    }
    if payload.get("capture_messages"):
        result["messages"] = [{"role": "system", "content": SYSTEM_PROMPT}]
        result["messages"] += from_langchain(messages)
    return result


if __name__ == "__main__":
    app.run()
