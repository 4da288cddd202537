"""The ``export`` trainer: writes every finished episode to Parquet and JSONL.

The default trainer of ``rollhub run``: it trains nothing and leaves training-ready data in
the run directory (``episodes.parquet``, ``episodes.jsonl``), in the schema of
:mod:`rollhub.export`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from rollhub.episode import EpisodeGroup
from rollhub.errors import UsageError
from rollhub.export import episode_to_row, write_rows
from rollhub.trainer import Trainer, TrainerOptions

log = logging.getLogger(__name__)


class ExportOptions(TrainerOptions):
    """``[trainer]`` options of the ``export`` trainer."""

    formats: list[Literal["parquet", "jsonl"]] = Field(
        default_factory=lambda: ["parquet", "jsonl"], description="files to write"
    )
    basename: str = Field("episodes", description="file name without suffix")
    include_failed: bool = Field(True, description="also write failed episodes (marked)")


class ExportTrainer(Trainer):
    """Collects episodes and writes them when the run ends."""

    name = "export"
    Options = ExportOptions
    options: ExportOptions

    def __init__(self, options: ExportOptions | None = None, *, run_dir: Path | None = None,
                 exp_id: str = "rollhub", **kw: Any) -> None:
        super().__init__(options, run_dir=run_dir, **kw)
        self.exp_id = exp_id
        self.rows: list[dict[str, Any]] = []

    async def start(self) -> None:
        """Create the run directory (required: the files go there)."""
        if self.run_dir is None:
            raise UsageError("the export trainer needs a run directory (run_dir)")
        self.run_dir.mkdir(parents=True, exist_ok=True)

    async def consume(self, group: EpisodeGroup) -> dict[str, Any]:
        """Turn a finished group into export rows (failed episodes too, marked)."""
        for ep in group.episodes:
            if ep.ok or self.options.include_failed:
                self.rows.append(episode_to_row(ep, self.exp_id))
        return {"rows": len(self.rows)}

    async def close(self) -> dict[str, Any]:
        """Write every row to each configured format; return ``{format: path}``."""
        assert self.run_dir is not None
        written = {}
        for fmt in self.options.formats:
            path = write_rows(self.rows, self.run_dir / f"{self.options.basename}.{fmt}")
            written[fmt] = str(path)
            log.info("wrote %d episodes to %s", len(self.rows), path)
        return written
