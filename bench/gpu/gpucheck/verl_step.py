"""One verl GRPO step through the rollhub agent loop: its overrides, and its metrics read back.

verl's console logger (``trainer.logger = ["console"]``, verl's ``LocalLogger``) prints one
line per step::

    step:1 - actor/pg_loss:np.float64(-0.0123) - critic/score/mean:0.25 - timing_s/step:41.2

(``key:value`` pairs joined by `` - ``; values are ``pprint.pformat`` of numbers, so NumPy
scalars read ``np.float64(...)``). Under Ray the line is prefixed with the actor's name, e.g.
``(TaskRunner pid=1234) step:1 - ...``, sometimes in ANSI colours. Standard library only: the
verl-side tests import this module in verl's own environment.
"""

from __future__ import annotations

import math
import re

__all__ = [
    "REQUIRED",
    "STEP_OVERRIDES",
    "parse_steps",
    "parse_value",
    "step_problems",
]

#: Hydra overrides of ``rollhub_verl.launch examples/verl/rollhub.toml`` for one small step.
#: sdpa attention and no padding removal: verl defaults to flash-attn, which is not installed
#: (it has no wheel for every torch; building it takes far longer than the step)
STEP_OVERRIDES = [
    "trainer.total_training_steps=1",
    "data.train_batch_size=8",
    "actor_rollout_ref.actor.ppo_mini_batch_size=8",
    "actor_rollout_ref.model.use_remove_padding=false",
    "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
]

#: metrics a finished step must report, finite
REQUIRED = ("actor/pg_loss", "critic/score/mean")

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_STEP = re.compile(r"(?:^|[\s)])step:(\d+)(?= - |$)")
_NUMBER = re.compile(
    r"^(?:np\.[a-z0-9_]+\()?\s*([-+]?(?:\d+(?:\.\d*)?(?:e[-+]?\d+)?|\.\d+(?:e[-+]?\d+)?|nan|inf))"
    r"\s*\)?$",
    re.IGNORECASE,
)


def parse_value(text: str) -> float | None:
    """A logged number (``0.5``, ``-1e-05``, ``np.float32(0.5)``, ``nan``, ``True``), else None."""
    text = text.strip()
    if text in ("True", "False"):
        return float(text == "True")
    match = _NUMBER.match(text)
    return float(match.group(1)) if match else None


def parse_steps(output: str) -> dict[int, dict[str, float]]:
    """``{step: {key: value}}`` of every console-logger line in ``output`` (later lines of the
    same step add to and override earlier ones); other lines are ignored."""
    steps: dict[int, dict[str, float]] = {}
    for raw in output.splitlines():
        line = _ANSI.sub("", raw).rstrip()
        match = _STEP.search(line)
        if match is None:
            continue
        metrics = steps.setdefault(int(match.group(1)), {})
        for pair in line[match.end() :].split(" - ")[1:]:
            key, _, value = pair.partition(":")
            number = parse_value(value)
            if number is not None:
                metrics[key] = number
    return steps


def step_problems(
    steps: dict[int, dict[str, float]], step: int = 1, required: tuple[str, ...] = REQUIRED
) -> list[str]:
    """What is wrong with ``step``'s metrics (empty: the step is complete and finite)."""
    if step not in steps:
        seen = ", ".join(str(s) for s in sorted(steps)) or "none"
        return [f"no console line for step {step} (steps seen: {seen})"]
    metrics = steps[step]
    problems = []
    for key in required:
        if key not in metrics:
            problems.append(f"step {step} lacks {key}")
        elif not math.isfinite(metrics[key]):
            problems.append(f"step {step}: {key} = {metrics[key]}")
    return problems
