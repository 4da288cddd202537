"""The ``rllm`` trainer: finished groups written as rLLM episodes (JSONL).

A consumer (it trains nothing): each finished group is appended to
``<run_dir>/rllm_episodes.jsonl`` and flushed, one :func:`~rollhub_rllm.episodes.episode_to_rllm`
dict per line, which rLLM's ``Episode.from_dict`` reads back. Use it to feed episodes that
rollhub collected (e.g. through the ``rllm`` token source) to rLLM tooling::

    [trainer]
    name = "rllm"
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import IO, Any

from pydantic import Field
from rollhub.episode import EpisodeGroup
from rollhub.errors import UsageError
from rollhub.registry import ComponentContext
from rollhub.training import GroupConsumer, TrainerOptions

from rollhub_rllm.episodes import episode_to_rllm

__all__ = ["RllmEpisodeExport", "RllmExportOptions"]

log = logging.getLogger(__name__)


class RllmExportOptions(TrainerOptions):
    """``[trainer]`` options of the ``rllm`` trainer."""

    filename: str = Field("rllm_episodes.jsonl", description="file in the run directory")
    include_failed: bool = Field(True, description="also write failed episodes (marked)")


class RllmEpisodeExport(GroupConsumer):
    """Appends every finished group to a JSONL file of rLLM episodes."""

    name = "rllm"
    Options = RllmExportOptions
    options: RllmExportOptions
    policies_refusal = (
        "rLLM's trainer trains one actor from these episodes; the turns of a second policy "
        "would be trained into that actor"
    )

    def __init__(
        self,
        options: RllmExportOptions | None = None,
        *,
        context: ComponentContext | None = None,
        run_dir: Path | None = None,
        exp_id: str | None = None,
        **kw: object,
    ) -> None:
        super().__init__(options, context=context, run_dir=run_dir, exp_id=exp_id, **kw)
        self.written = 0
        self._file: IO[str] | None = None

    @property
    def path(self) -> Path | None:
        """Where the episodes go (None without a run directory)."""
        return self.run_dir / self.options.filename if self.run_dir else None

    async def start(self) -> None:
        """Create the run directory and the file (a run directory is required)."""
        if self.path is None:
            raise UsageError("the rllm trainer needs a run directory (run_dir)")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("w", encoding="utf-8")

    async def consume(self, group: EpisodeGroup) -> dict[str, Any]:
        """Write the group's episodes (failed ones too, unless ``include_failed`` is off)."""
        if self._file is None:
            raise UsageError("the rllm trainer is not started")
        for episode in group.episodes:
            if episode.ok or self.options.include_failed:
                self._file.write(json.dumps(episode_to_rllm(episode), default=str) + "\n")
                self.written += 1
        self._file.flush()
        return {"rllm_episodes": self.written}

    async def close(self) -> dict[str, Any]:
        """Close the file; return its path and the number of episodes written."""
        if self._file is not None:
            self._file.close()
            self._file = None
        return {"rllm_episodes": str(self.path), "episodes": self.written}
