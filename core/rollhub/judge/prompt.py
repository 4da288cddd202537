"""What the judge is asked, and how its answer is read (pure, no I/O).

Rank mode (RULER-style) shows the task and every attempt of a group in one message and asks
for one line per attempt, ``<n>: <score>``; score mode shows one attempt and asks for one
number. Scores run from 0 to ``scale`` and become rewards in [0, 1]. An attempt the reply
gives no readable score gets None (the caller scores it 0 and counts it as unparsed); a
number above ``scale`` is no score (an untrained judge that does the task's arithmetic,
``1: 8080 + 9110``, must not read as a perfect score).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "attempt_text",
    "parse_rank",
    "parse_score",
    "rank_messages",
    "score_messages",
    "task_text",
]

#: result keys that are bookkeeping, not the attempt
_HIDDEN = frozenset({"rewards", "success", "_rollhub"})
_RANK_LINE = re.compile(r"(?:attempt\s*)?#?(\d+)\s*[:=)\-]\s*(\d+(?:\.\d+)?)", re.IGNORECASE)
_NUMBER = re.compile(r"\d+(?:\.\d+)?")

SYSTEM = "You are a strict, fair judge of attempts at a task."


def task_text(payload: Mapping[str, Any], field: str | None) -> str:
    """The task as the judge reads it: ``payload[field]``, else the payload as JSON."""
    if field is not None and field in payload:
        return str(payload[field])
    shown = {k: v for k, v in payload.items() if k != "_rollout"}
    return json.dumps(shown, ensure_ascii=False, sort_keys=True)


def attempt_text(result: Mapping[str, Any] | None, field: str | None, max_chars: int) -> str:
    """One attempt as the judge reads it: ``result[field]``, else the result as JSON without
    its rewards; cut in the middle past ``max_chars``."""
    result = result or {}
    if field is not None and field in result:
        text = str(result[field])
    else:
        text = json.dumps(
            {k: v for k, v in result.items() if k not in _HIDDEN},
            ensure_ascii=False,
            sort_keys=True,
        )
    if len(text) > max_chars:
        half = (max_chars - 5) // 2
        text = f"{text[:half]} ... {text[-half:]}"
    return text


def rank_messages(
    task: str, attempts: Sequence[str], rubric: str, scale: int
) -> list[dict[str, str]]:
    """The chat messages of a rank call over ``attempts``."""
    shown = "\n\n".join(f"Attempt {i}:\n{a}" for i, a in enumerate(attempts, 1))
    lines = "\n".join(f"{i}: <score>" for i in range(1, len(attempts) + 1))
    return [
        {"role": "system", "content": SYSTEM},
        {
            "role": "user",
            "content": (
                f"Task:\n{task}\n\nRubric: {rubric}\n\n{shown}\n\nCompare the attempts and score "
                f"each from 0 (worst) to {scale} (best). Reply with exactly these lines and "
                f"nothing else:\n{lines}"
            ),
        },
    ]


def score_messages(task: str, attempt: str, rubric: str, scale: int) -> list[dict[str, str]]:
    """The chat messages of a score call over one attempt."""
    return [
        {"role": "system", "content": SYSTEM},
        {
            "role": "user",
            "content": (
                f"Task:\n{task}\n\nRubric: {rubric}\n\nAttempt:\n{attempt}\n\nScore the attempt "
                f"from 0 (worst) to {scale} (best). Reply with the number only."
            ),
        },
    ]


def parse_rank(reply: str, n: int, scale: int) -> list[float | None]:
    """Rewards in [0, 1] of attempts 1..n from a rank reply (the first score in range given
    for each attempt counts; None: no readable score)."""
    out: list[float | None] = [None] * n
    for index, value in _RANK_LINE.findall(reply):
        i = int(index) - 1
        if 0 <= i < n and out[i] is None:
            out[i] = _reward(float(value), scale)
    return out


def parse_score(reply: str, scale: int) -> float | None:
    """The reward in [0, 1] of a score reply: its first number (None: no number, or one
    above ``scale``)."""
    found = _NUMBER.search(reply)
    return _reward(float(found.group()), scale) if found else None


def _reward(value: float, scale: int) -> float | None:
    return value / scale if 0.0 <= value <= scale else None
