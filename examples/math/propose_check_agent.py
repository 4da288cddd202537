"""Two agents that train each other: a proposer drafts the calculator call, a checker
accepts or corrects it before it runs.

Each problem is the calculator task's ("What is 47 * 386?", too large to work out in the
head). One episode, three model calls, two policies (``_rollout.models`` names each one's
model id; the agent picks a policy per call by the ``model`` it sends):

1. the **proposer** drafts the call through the chat template's tool syntax;
2. the **checker** reads the question and the drafted call and replies ``ACCEPT`` or
   ``FIX: <expression>``; anything else stops the episode (nothing runs);
3. the calculator runs the accepted or corrected expression, and the proposer answers
   ``Answer: <number>`` with what it returned.

Rewards, one component each (``[[policies]] reward_key`` picks the one that trains a
policy): ``solved`` (the final answer is right: the proposer's), ``verdict`` (the
expression that ran computes the answer: the checker's), ``drafted`` (the proposer's draft
was right as it stood; reported, not trained on). Neither policy succeeds alone: a right
draft fails when the checker garbles its verdict, and the checker can only pass on or fix
what the proposer drafted and the proposer must still answer with the result.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agent import (
    CALCULATOR_TOOL,
    MathTask,
    calculate,
    calculator_text,
    extract_answer,
    reward,
    rollout_client,
    split_sampling,
)
from calc_agent import SHOTS, SYSTEM_PROMPT
from rollhub.app import RolloutApp, RolloutContext

app = RolloutApp()

CHECKER_PROMPT = (
    "You check a calculator call before it runs. If its expression computes what the "
    "question asks, reply ACCEPT. Otherwise reply FIX: <the right expression>."
)

#: worked examples of two of the checker's cases, accepting a call and supplying a missing
#: one: the untrained checker accepts every right call, but accepts a missing call (which
#: runs nothing) about three times in four, so it has something to learn
CHECKER_SHOTS: list[dict[str, Any]] = [
    {"role": "user", "content": "Question: What is 23 * 419?\nProposed call: calculator(23 * 419)"},
    {"role": "assistant", "content": "ACCEPT"},
    {"role": "user", "content": "Question: What is 64 * 301?\nProposed call: none"},
    {"role": "assistant", "content": "FIX: 64 * 301"},
]

_FIX = re.compile(r"^\s*FIX\s*:\s*(.+)", re.IGNORECASE)


def verdict(reply: str | None, draft: str | None) -> tuple[str, str | None]:
    """``(kind, expression to run)`` from the checker's reply: ``accept`` runs the draft,
    ``fix`` the checker's expression, ``invalid`` (anything else, or accepting a missing
    call) runs nothing."""
    text = (reply or "").strip()
    if text.upper().startswith("ACCEPT"):
        return ("accept", draft) if draft is not None else ("invalid", None)
    found = _FIX.match(text)
    if found:
        return "fix", found.group(1).splitlines()[0].strip()
    return "invalid", None


def _computes(expression: str | None, expected: float | None) -> bool:
    if expression is None:
        return False
    try:
        return reward(float(calculate(expression)), expected) == 1.0
    except (ValueError, TypeError):
        return False


@app.rollout_entrypoint
def propose_check(payload: dict[str, Any], context: RolloutContext) -> dict[str, Any]:
    """Draft (proposer), check (checker), run, answer (proposer); see the module doc."""
    task = MathTask.model_validate(payload)
    client, default_model, sampling = rollout_client(context)
    models = context.rollout.models if context.rollout is not None else {}
    proposer = models.get("proposer", default_model)
    checker = models.get("checker", default_model)
    direct, extra = split_sampling(sampling)
    with client:

        def ask(model: str, messages: list[dict[str, Any]], **kw: Any) -> Any:
            response = client.chat.completions.create(
                model=model, messages=messages, extra_body=extra or None, **direct, **kw
            )
            return response.choices[0].message

        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM_PROMPT},
            *SHOTS,
            {"role": "user", "content": task.question},
        ]
        draft_message = ask(proposer, messages, tools=[CALCULATOR_TOOL])
        call = draft_message.tool_calls[0] if draft_message.tool_calls else None
        draft = _expression(call.function.arguments) if call is not None else None
        shown = f"calculator({draft})" if draft is not None else "none"
        check = ask(
            checker,
            [
                {"role": "system", "content": CHECKER_PROMPT},
                *CHECKER_SHOTS,
                {"role": "user", "content": f"Question: {task.question}\nProposed call: {shown}"},
            ],
        )
        kind, expression = verdict(check.content, draft)
        answer_text = output = None
        if expression is not None:
            output = calculator_text(expression)
            messages.append(draft_message.model_dump(exclude_none=True))
            if call is not None:
                messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
            else:
                messages.append({"role": "user", "content": f"The calculator says {output}."})
            answer_text = ask(proposer, messages).content
    predicted = extract_answer(answer_text)
    solved = reward(predicted, task.answer)
    return {
        "rewards": {
            "solved": solved,
            "verdict": float(_computes(expression, task.answer)),
            "drafted": float(_computes(draft, task.answer)),
        },
        "success": solved == 1.0,
        "draft": draft,
        "check": check.content,
        "verdict": kind,
        "ran": expression,
        "answer": predicted,
        "expected": task.answer,
        "final_message": answer_text,
        # what a judge is shown (train-two-policies-judge.toml): the episode, not the answer key
        "transcript": f"Proposed call: {shown}\nChecker: {check.content}\n"
        f"Calculator ran: {expression} = {output}\nFinal reply: {answer_text}",
    }


def _expression(arguments: str | None) -> str | None:
    try:
        value = json.loads(arguments or "{}").get("expression")
    except (ValueError, AttributeError):
        return None
    return str(value) if value else None
