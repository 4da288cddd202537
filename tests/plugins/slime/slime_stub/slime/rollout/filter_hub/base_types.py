"""slime's dynamic-sampling filter output, structurally as recorded."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class DynamicFilterOutput:
    """Whether a finished prompt group is kept, and why not."""

    keep: bool
    reason: str | None = None
    keep_when_insufficient: bool = False
