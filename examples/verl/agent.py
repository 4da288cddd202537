"""A GSM8K agent served as a rollout worker for verl (``rollhub verl rollhub.toml``).

Ordinary agent code: the plain ``openai`` SDK, a ``calculator`` tool, and a loop that runs
tool calls until the model answers. It reads the row verl's dataset gives (``messages``
from the ``prompt`` column, the reference answer in ``reward_model.ground_truth``) and
returns ``{"rewards": 1.0 or 0.0}``; the model endpoint and key come from ``_rollout``.
Every model call goes through the rollhub gateway, which samples from verl's own rollout
servers, so verl trains on exactly the tokens they sampled.
"""

from __future__ import annotations

import ast
import json
import operator
import re
from typing import Any

from openai import BadRequestError, OpenAI
from rollhub.app import RolloutApp, RolloutContext

app = RolloutApp()

MAX_TURNS = 4

CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression with + - * / and parentheses.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string", "description": "e.g. (12 + 7) * 3"}},
            "required": ["expression"],
        },
    },
}

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.Div: operator.truediv, ast.USub: operator.neg, ast.UAdd: operator.pos}  # fmt: skip


def calculate(expression: str) -> str:
    """Arithmetic only: the AST is walked, nothing is evaluated as code."""

    def walk(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](walk(node.operand))
        raise ValueError("only numbers, + - * / and parentheses")

    try:
        value = walk(ast.parse(expression.replace(",", ""), mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError) as exc:
        return f"error: {exc}"
    return str(int(value)) if float(value).is_integer() else f"{value:.6g}"


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def final_number(text: str | None) -> str | None:
    """The first number after the last ``####`` (GSM8K's format), else the last number."""
    if not text:
        return None
    if "####" in text:
        found = _NUMBER.findall(text.rsplit("####", 1)[-1])[:1]
    else:
        found = _NUMBER.findall(text)[-1:]
    return found[0].replace(",", "") if found else None


def score(text: str | None, truth: Any) -> float:
    """1.0 when the final number equals the reference answer."""
    got = final_number(text)
    if got is None or truth is None:
        return 0.0
    try:
        return 1.0 if float(got) == float(str(truth).replace(",", "")) else 0.0
    except ValueError:
        return 0.0


@app.rollout_entrypoint
def gsm8k_agent(payload: dict[str, Any], context: RolloutContext) -> dict[str, Any]:
    """Solve one row with the calculator; reward the final answer."""
    rollout = context.rollout
    assert rollout is not None and rollout.base_url and rollout.model_id
    key = rollout.api_key.get_secret_value() if rollout.api_key else "EMPTY"
    messages: list[dict[str, Any]] = list(payload["messages"])
    truth = (payload.get("reward_model") or {}).get("ground_truth")
    tools: list[dict[str, Any]] | None = [CALCULATOR]
    text, calls = None, 0
    with OpenAI(base_url=rollout.base_url, api_key=key, max_retries=2) as client:
        for _ in range(MAX_TURNS):
            try:
                choice = client.chat.completions.create(
                    model=rollout.model_id, messages=messages, tools=tools or None
                ).choices[0]
            except BadRequestError as exc:  # the context budget is spent: stop here
                if exc.param not in ("messages", "max_tokens"):
                    raise
                break
            messages.append(choice.message.model_dump(exclude_none=True))
            text = choice.message.content
            if not choice.message.tool_calls:
                break
            for call in choice.message.tool_calls:
                calls += 1
                try:
                    expression = json.loads(call.function.arguments or "{}").get("expression", "")
                except json.JSONDecodeError:
                    expression = ""
                messages.append(
                    {"role": "tool", "tool_call_id": call.id, "content": calculate(str(expression))}
                )
    return {"rewards": score(text, truth), "answer": final_number(text), "tool_calls": calls}
