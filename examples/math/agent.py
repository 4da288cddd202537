"""A tool-using math agent served as a rollout worker.

The agent is ordinary production code: the plain ``openai`` SDK, a ``calculator`` tool and
a loop that runs tool calls until the model answers. Two things make it a rollout worker:
``@app.rollout_entrypoint`` instead of AgentCore's ``@app.entrypoint``, and a returned dict
with ``rewards``. The model endpoint, model name, key and sampling parameters come from the
``_rollout`` object the trainer sends.

Run it locally::

    python examples/math/agent.py --port 8080

and point a rollhub runtime at ``examples/math/agent.py:app``.
"""

from __future__ import annotations

import argparse
import ast
import json
import logging
import math
import operator
import re
from typing import Any

from openai import BadRequestError, OpenAI
from pydantic import BaseModel, ConfigDict, Field
from rollhub.app import RolloutApp, RolloutContext

log = logging.getLogger("examples.math.agent")

app = RolloutApp()

SYSTEM_PROMPT = (
    "You are a careful math assistant. Use the calculator tool for arithmetic. "
    "When you are done, give the final answer as 'Answer: <number>'."
)

NO_TOOLS_PROMPT = (
    "You are a careful math assistant. Work step by step, then give the final answer as "
    "'Answer: <number>'."
)

CALCULATOR_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression: + - * / // % ** and parentheses, "
        "plus sqrt(x), abs(x), round(x, n), min(...), max(...).",
        "parameters": {
            "type": "object",
            "properties": {
                "expression": {"type": "string", "description": "e.g. (12 + 7) * 3"},
            },
            "required": ["expression"],
        },
    },
}

# Sampling keys the chat-completions API takes directly; others go into extra_body
# (engine-specific ones such as top_k).
_OPENAI_SAMPLING = {
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "seed",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "logprobs",
    "top_logprobs",
}


class MathTask(BaseModel):
    """This agent's own payload fields, validated before any model call."""

    model_config = ConfigDict(extra="ignore")

    question: str = Field(min_length=1, description="the word problem")
    answer: float | None = Field(None, description="reference answer, for the reward")
    id: str | None = Field(None, description="dataset row id")
    max_turns: int = Field(6, ge=1, le=32, description="model calls before giving up")


# Calculator ---------------------------------------------------------------------------------


class CalculatorError(ValueError):
    """The expression is not plain arithmetic or cannot be evaluated."""


_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS = {"sqrt": math.sqrt, "abs": abs, "round": round, "min": min, "max": max}
_MAX_EXPONENT = 64
_MAX_MAGNITUDE = 1e18
_MAX_LENGTH = 200
# "1,000" is a thousands separator, "round(2.5, 1)" is an argument list.
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


def calculate(expression: str) -> float | int:
    """Evaluate arithmetic safely: the AST is walked, nothing is ``eval``-ed.

    :raises CalculatorError: anything but numbers, operators and the listed functions, or a
        result too large to be a sensible answer.
    """
    if len(expression) > _MAX_LENGTH:
        raise CalculatorError(f"expression longer than {_MAX_LENGTH} characters")
    try:
        tree = ast.parse(_THOUSANDS.sub("", expression.replace("^", "**")), mode="eval")
    except SyntaxError as exc:
        raise CalculatorError(f"not an arithmetic expression: {expression!r}") from exc
    return _eval(tree.body)


def _eval(node: ast.AST) -> float | int:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > _MAX_EXPONENT:
            raise CalculatorError(f"exponent {right} is too large")
        try:
            value = _BINARY[type(node.op)](left, right)
        except ZeroDivisionError as exc:
            raise CalculatorError("division by zero") from exc
        if isinstance(value, complex) or abs(value) > _MAX_MAGNITUDE:
            raise CalculatorError("result out of range")
        return value
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and not node.keywords
    ):
        args = [_eval(a) for a in node.args]
        try:
            return _FUNCTIONS[node.func.id](*args)
        except (TypeError, ValueError) as exc:
            raise CalculatorError(f"{node.func.id}: {exc}") from exc
    raise CalculatorError(f"unsupported syntax: {ast.dump(node)[:60]}")


def calculator_text(expression: str) -> str:
    """The calculator's answer as the model sees it: ``42``, ``2.5`` or ``error: …``."""
    try:
        value = calculate(expression)
    except ValueError as exc:  # CalculatorError, and math's own (sqrt of a negative)
        return f"error: {exc}"
    return str(int(value) if isinstance(value, float) and value.is_integer() else value)


def run_tool(name: str, arguments: str) -> str:
    """Execute one tool call and return the text the model sees (errors included)."""
    if name != "calculator":
        return f"error: unknown tool {name!r}"
    try:
        expression = json.loads(arguments or "{}").get("expression", "")
    except (ValueError, AttributeError) as exc:
        return f"error: {exc}"
    return calculator_text(str(expression))


# Answer and reward --------------------------------------------------------------------------

_NUMBER = r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+"
_BOXED = re.compile(r"\\boxed\{\s*(" + _NUMBER + r")\s*\}")
_ANSWER = re.compile(r"answer\s*(?:is)?\s*[:=]?\s*\$?\s*(" + _NUMBER + ")", re.IGNORECASE)
_ANY = re.compile(_NUMBER)


def extract_answer(text: str | None) -> float | None:
    """The final answer in a reply: ``\\boxed{x}``, else ``Answer: x``, else the last number."""
    if not text:
        return None
    for pattern in (_BOXED, _ANSWER):
        found = pattern.findall(text)
        if found:
            return _to_number(found[-1])
    found = _ANY.findall(text)
    return _to_number(found[-1]) if found else None


def _to_number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def reward(predicted: float | None, expected: float | None) -> float:
    """1.0 when the answer matches the reference (relative tolerance 1e-6), else 0.0."""
    if predicted is None or expected is None:
        return 0.0
    return 1.0 if math.isclose(predicted, expected, rel_tol=1e-6, abs_tol=1e-9) else 0.0


# The agent ----------------------------------------------------------------------------------


def split_sampling(sampling: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(create() keyword arguments, extra_body)`` from the ``_rollout.sampling`` dict."""
    direct = {k: v for k, v in sampling.items() if k in _OPENAI_SAMPLING}
    extra = {k: v for k, v in sampling.items() if k not in _OPENAI_SAMPLING}
    return direct, extra


def solve(
    client: OpenAI,
    model: str,
    task: MathTask,
    sampling: dict[str, Any],
    *,
    system_prompt: str = SYSTEM_PROMPT,
    shots: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Run the tool loop for one problem and score the final answer.

    ``shots`` are worked examples (earlier user/assistant/tool messages) placed between the
    system prompt and the question. A model server that cannot take tools (HTTP 400 about
    ``tools``, as a gateway serving a chat template without tool support answers) gets the
    problem without the calculator.
    """
    direct, extra = split_sampling(sampling)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system_prompt},
        *(shots or []),
        {"role": "user", "content": task.question},
    ]
    tools: list[dict[str, Any]] | None = [CALCULATOR_TOOL]
    tool_calls = tool_errors = turns = 0
    final_text: str | None = None
    finish_reason = None
    while turns < task.max_turns:
        turns += 1
        try:
            response = client.chat.completions.create(
                model=model,
                messages=messages,
                extra_body=extra or None,
                **({"tools": tools} if tools else {}),
                **direct,
            )
        except BadRequestError as exc:
            if tools is None or exc.param != "tools":
                raise
            log.warning("the model server takes no tools (%s); solving without them", exc.message)
            tools, turns = None, turns - 1
            messages[0] = {"role": "system", "content": NO_TOOLS_PROMPT}
            continue
        choice = response.choices[0]
        finish_reason = choice.finish_reason
        message = choice.message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            final_text = message.content
            break
        for call in message.tool_calls:
            output = run_tool(call.function.name, call.function.arguments)
            tool_calls += 1
            tool_errors += output.startswith("error:")
            messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
    predicted = extract_answer(final_text)
    score = reward(predicted, task.answer)
    return {
        "rewards": score,
        "success": score == 1.0,
        "answer": predicted,
        "expected": task.answer,
        "turns": turns,
        "final_message": final_text,
        "metrics": {
            "tool_calls": tool_calls,
            "tool_errors": tool_errors,
            "finish_reason": finish_reason,
            "answered": final_text is not None,
            "tools_offered": tools is not None,
        },
    }


def rollout_client(context: RolloutContext) -> tuple[OpenAI, str, dict[str, Any]]:
    """``(client, model, sampling)`` from the ``_rollout`` object the trainer sent."""
    rollout = context.rollout
    assert rollout is not None
    if not rollout.base_url or not rollout.model_id:
        raise ValueError("_rollout.base_url and _rollout.model_id are required by this agent")
    api_key = rollout.api_key.get_secret_value() if rollout.api_key else "EMPTY"
    client = OpenAI(base_url=rollout.base_url, api_key=api_key, max_retries=2)
    return client, rollout.model_id, rollout.sampling


@app.rollout_entrypoint
def math_agent(payload: dict[str, Any], context: RolloutContext) -> dict[str, Any]:
    """The rollout handler: validate the payload, build the client from ``_rollout``, solve."""
    task = MathTask.model_validate(payload)  # a bad payload becomes a stored error result
    client, model, sampling = rollout_client(context)
    with client:
        return solve(client, model, task, sampling)


def main(argv: list[str] | None = None) -> None:
    """``python examples/math/agent.py [--host H] [--port P]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    app.run(port=args.port, host=args.host)


if __name__ == "__main__":
    main()
