"""slime's rollout-function outputs, structurally as recorded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from slime.utils.types import Sample


@dataclass
class RolloutFnTrainOutput:
    """A training step's samples: groups of samples, plus metrics."""

    samples: list[list[Sample]]
    metrics: dict[str, Any] = None


@dataclass
class RolloutFnEvalOutput:
    """Per eval dataset: rewards, truncated flags and samples, plus metrics."""

    data: dict[str, dict[str, Any]]
    metrics: dict[str, Any] = None
