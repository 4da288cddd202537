"""A calculator agent whose task cannot be solved without its tool, for the RL demo.

Each problem multiplies, adds or subtracts numbers too large for a small model to work out
in its head ("What is 47 * 386?"): an episode succeeds only when the model calls the
``calculator`` tool through the chat template's tool syntax, reads the result the tool
returns, and answers with it. The reward checks the answer (1.0 or 0.0), so the policy can
only raise it by learning the multi-turn tool loop.

One worked example (a question, the tool call, the tool's reply and the answer) sits
between the system prompt and the question, so SmolLM2-135M already solves some problems
before training: GRPO needs groups where some samples succeed and others fail.

The tool loop itself is the math agent's (:func:`agent.solve`); only the prompt differs.
"""

from __future__ import annotations

from typing import Any

from agent import MathTask, rollout_client, solve
from rollhub.app import RolloutApp, RolloutContext

app = RolloutApp()

#: model calls per problem: one for the tool call, one for the answer, one to spare
MAX_TURNS = 3

SYSTEM_PROMPT = (
    "You solve arithmetic with the calculator tool. Call the calculator with the expression, "
    "then reply 'Answer: <number>' using the number the calculator returned."
)

#: the worked example the model sees before each question
SHOTS: list[dict[str, Any]] = [
    {"role": "user", "content": "What is 23 * 419?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_example",
                "type": "function",
                "function": {"name": "calculator", "arguments": '{"expression": "23 * 419"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_example", "content": "9637"},
    {"role": "assistant", "content": "Answer: 9637"},
]


@app.rollout_entrypoint
def calc_agent(payload: dict[str, Any], context: RolloutContext) -> dict[str, Any]:
    """Validate the problem, build the client from ``_rollout``, run the tool loop."""
    task = MathTask.model_validate({"max_turns": MAX_TURNS, **payload})
    client, model, sampling = rollout_client(context)
    with client:
        return solve(client, model, task, sampling, system_prompt=SYSTEM_PROMPT, shots=SHOTS)
