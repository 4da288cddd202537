"""The result of a check, and the one Markdown table of all of them."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["STATUSES", "Result", "exit_code", "format_figure", "render_table", "summary_line"]

STATUSES = ("pass", "fail", "skip")


@dataclass
class Result:
    """What one check found: ``status`` is pass, fail or skip; ``detail`` says why when it
    did not pass (or what was compared when it did)."""

    check: str
    status: str
    seconds: float = 0.0
    figures: dict[str, Any] = field(default_factory=dict)
    detail: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, not {self.status!r}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def format_figure(value: Any) -> str:
    """A figure as shown in the table: floats with 4 significant digits (small ones in
    scientific notation), None as an em dash."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value != 0 and abs(value) < 1e-3:
            return f"{value:.2e}"
        return f"{value:.4g}"
    return str(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ").strip()


def render_table(results: list[Result]) -> str:
    """One Markdown table: check, status, seconds, figures (``name=value; ...``), detail."""
    lines = ["| check | status | seconds | figures | detail |", "| --- | --- | ---: | --- | --- |"]
    for r in results:
        figures = "; ".join(f"{k}={format_figure(v)}" for k, v in r.figures.items())
        seconds = f"{r.seconds:.0f}" if r.status != "skip" else "—"
        lines.append(
            f"| {r.check} | {r.status.upper()} | {seconds} | {_cell(figures) or '—'} "
            f"| {_cell(r.detail) or '—'} |"
        )
    return "\n".join(lines)


def exit_code(results: list[Result]) -> int:
    """0 unless a check failed (skips are not failures)."""
    return 1 if any(r.status == "fail" for r in results) else 0


def summary_line(results: list[Result]) -> str:
    """``N passed, N failed, N skipped``, with a warning when nothing ran at all."""
    counts = {s: sum(r.status == s for r in results) for s in STATUSES}
    line = f"{counts['pass']} passed, {counts['fail']} failed, {counts['skip']} skipped"
    if results and counts["skip"] == len(results):
        line += "\nWARNING: every check was skipped: nothing was verified"
    return line
