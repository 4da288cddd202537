"""The experiment progress bar: episodes/s, tokens/s, mean reward so far, failures, ETA."""

from __future__ import annotations

import time
from typing import Any

from rollhub.episode import Episode

__all__ = ["EpisodeProgress"]


class EpisodeProgress:
    """A rich progress bar fed one finished episode at a time; a no-op when disabled."""

    def __init__(self, total: int, *, enabled: bool = True) -> None:
        self.total = total
        self.enabled = enabled
        self.done = 0
        self.failed = 0
        self.tokens = 0
        self._reward_sum = 0.0
        self._reward_n = 0
        self._t0 = time.monotonic()
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> EpisodeProgress:
        if self.enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._progress = Progress(
                TextColumn("[bold]episodes"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[stats]}"), TimeElapsedColumn(), TextColumn("ETA"),
                TimeRemainingColumn(),
            )
            self._progress.__enter__()
            self._task = self._progress.add_task("episodes", total=self.total, stats="")
        self._t0 = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)

    def episode_done(self, episode: Episode) -> None:
        """Count one terminal episode and refresh the bar."""
        self.done += 1
        self.failed += 0 if episode.ok else 1
        self.tokens += episode.num_sampled_tokens
        if episode.ok and episode.reward is not None:
            self._reward_sum += episode.reward
            self._reward_n += 1
        if self._progress is not None:
            self._progress.update(self._task, completed=self.done, stats=self.stats_text())

    def stats_text(self) -> str:
        """``ep/s tok/s reward failures`` as shown next to the bar."""
        dt = max(time.monotonic() - self._t0, 1e-9)
        reward = f"{self._reward_sum / self._reward_n:.3f}" if self._reward_n else "-"
        return (f"{self.done / dt:.2f} ep/s  {self.tokens / dt:.1f} tok/s  "
                f"reward {reward}  failed {self.failed}")
