"""A progress bar for many rollouts: done, failed, running, rate and ETA.

Built on ``rich``; shared by the batch runner and the pipeline. It turns itself off when
the output is not a terminal unless asked for explicitly, so logs and CI stay clean.
"""

from __future__ import annotations

import sys
import time
from typing import Any

__all__ = ["RolloutProgress"]


class RolloutProgress:
    """Counts rollouts and, when enabled, draws one rich progress line.

    :param total: rollouts expected (None when unknown).
    :param enabled: True to draw, False never; None draws only on a terminal.
    :param description: label in front of the bar.

    Use as a context manager, or call :meth:`close`.
    """

    def __init__(
        self, total: int | None, *, enabled: bool | None = None, description: str = "rollouts"
    ) -> None:
        self.total = total
        self.done = 0
        self.failed = 0
        self.running = 0
        self.resumed = 0
        self._t0 = time.monotonic()
        if enabled is None:
            enabled = sys.stderr.isatty()
        self.enabled = enabled
        self._progress: Any = None
        self._task: Any = None
        self._note = ""
        if enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("failed [red]{task.fields[failed]}[/] running {task.fields[running]}"),
                TextColumn("{task.fields[rate]}/s"),
                TextColumn("{task.fields[note]}"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                transient=False,
            )
            self._progress.start()
            self._task = self._progress.add_task(
                description, total=total, failed=0, running=0, rate="0.0", note=""
            )
        self._note = ""

    @property
    def rate(self) -> float:
        """Rollouts finished per second since the start (resumed ones not counted)."""
        elapsed = time.monotonic() - self._t0
        return (self.done - self.resumed) / elapsed if elapsed > 0 else 0.0

    def started(self, n: int = 1) -> None:
        """``n`` rollouts were submitted."""
        self.running += n
        self._refresh()

    def finished(self, status: str, *, resumed: bool = False, was_running: bool = True) -> None:
        """One rollout reached ``status``."""
        self.done += 1
        if was_running:
            self.running = max(0, self.running - 1)
        if status != "ok":
            self.failed += 1
        if resumed:
            self.resumed += 1
        self._refresh()

    def note(self, text: str) -> None:
        """Extra figures shown after the rate (the pipeline: tokens/s, mean reward)."""
        self._note = text
        self._refresh()

    def summary(self) -> dict[str, float | int | None]:
        """Counters as a dict (for logs and run summaries)."""
        return {
            "total": self.total,
            "done": self.done,
            "failed": self.failed,
            "running": self.running,
            "resumed": self.resumed,
            "rate_per_s": round(self.rate, 2),
        }

    def _refresh(self) -> None:
        if self._progress is not None:
            self._progress.update(
                self._task,
                completed=self.done,
                failed=self.failed,
                running=self.running,
                rate=f"{self.rate:.1f}",
                note=self._note,
            )

    def close(self) -> None:
        """Stop drawing (idempotent)."""
        if self._progress is not None:
            self._refresh()
            self._progress.stop()
            self._progress = None

    def __enter__(self) -> RolloutProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
