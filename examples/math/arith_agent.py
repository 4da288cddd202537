"""A one-call arithmetic agent with a strict answer-format reward, for training demos.

The reply must *start* with the answer: ``"21"`` or ``"21 is the sum"`` earn the format
reward, ``"12 + 9 = 21"`` and ``"The answer is 21"`` do not. SmolLM2-135M starts with a
number in roughly a third of its replies and rarely with the right one, so the mean reward
has room to rise within a few dozen RL steps on a CPU.

The reward is the sum of two parts (both returned under ``parts``):

- ``format``: 1.0 when the reply starts with a number, else 0.0;
- ``correct``: 1.0 when that leading number equals the answer, else 0.0.
"""

from __future__ import annotations

import re
from typing import Any

from openai import OpenAI
from rollhub.app import RolloutApp, RolloutContext

app = RolloutApp()

SYSTEM_PROMPT = "You are a calculator. Reply with the number only."
_LEADING_NUMBER = re.compile(r"\s*(-?\d+(?:\.\d+)?)")


def score(reply: str, answer: float) -> dict[str, float]:
    """The reward components of one reply (see the module docstring)."""
    match = _LEADING_NUMBER.match(reply)
    if match is None:
        return {"format": 0.0, "correct": 0.0}
    return {"format": 1.0, "correct": float(abs(float(match.group(1)) - answer) < 1e-9)}


@app.rollout_entrypoint
def solve(payload: dict[str, Any], context: RolloutContext) -> dict[str, Any]:
    """Ask once; return the reply and its reward components."""
    rollout = context.rollout
    api_key = rollout.api_key.get_secret_value() if rollout.api_key else "EMPTY"
    client = OpenAI(base_url=rollout.base_url, api_key=api_key, max_retries=2)
    sampling = {k: v for k, v in (rollout.sampling or {}).items()
                if k in ("temperature", "top_p", "max_tokens", "seed")}
    out = client.chat.completions.create(
        model=rollout.model_id or "default",
        messages=[{"role": "system", "content": SYSTEM_PROMPT},
                  {"role": "user", "content": payload["question"]}],
        **sampling,
    )
    reply = out.choices[0].message.content or ""
    parts = score(reply, float(payload["answer"]))
    return {"rewards": sum(parts.values()), "parts": parts, "reply": reply}
