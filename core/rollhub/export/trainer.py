"""The ``export`` trainer: writes every finished episode to Parquet and JSONL.

The default trainer of ``rollhub run``: it trains nothing and leaves training-ready data in
the run directory (``episodes.parquet``, ``episodes.jsonl``), in the schema of
:mod:`rollhub.export`. JSONL rows are appended and flushed as each group finishes, so a run
that dies keeps every finished group; Parquet is written once, at the end.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from pydantic import Field

from rollhub.episode import EpisodeGroup
from rollhub.errors import UsageError
from rollhub.export import JsonlAppender, episode_to_row, write_rows
from rollhub.training.roles import GroupConsumer
from rollhub.training.trainer import TrainerOptions

log = logging.getLogger(__name__)


#: a file format the export trainer writes
ExportFormat = Literal["parquet", "jsonl"]


class ExportOptions(TrainerOptions):
    """``[trainer]`` options of the ``export`` trainer."""

    formats: list[ExportFormat] = Field(
        default_factory=lambda: list[ExportFormat](("parquet", "jsonl")),
        description="files to write",
    )
    basename: str = Field("episodes", description="file name without suffix")
    include_failed: bool = Field(True, description="also write failed episodes (marked)")


class ExportTrainer(GroupConsumer):
    """Collects episodes and writes them when the run ends."""

    name = "export"
    Options = ExportOptions
    options: ExportOptions

    def __init__(self, options: ExportOptions | None = None, **kw: Any) -> None:
        super().__init__(options, **kw)
        self.rows: list[dict[str, Any]] = []
        self._jsonl: Any = None
        #: formats left out because their package is missing (default formats only)
        self.skipped: list[str] = []

    async def start(self) -> None:
        """Create the run directory (required: the files go there).

        Parquet needs pyarrow (the ``export`` extra): when it is missing, a Parquet file
        asked for in ``trainer.formats`` is an error, the default one is left out.
        """
        if self.run_dir is None:
            raise UsageError("the export trainer needs a run directory (run_dir)")
        if "parquet" in self.options.formats and not _has_pyarrow():
            if "formats" in self.options.model_fields_set:
                raise UsageError(
                    "trainer.formats asks for parquet, which needs pyarrow: "
                    "pip install 'rollhub[export]', or set formats = [\"jsonl\"]"
                )
            log.info("pyarrow is not installed: writing JSONL only")
            self.skipped.append("parquet")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if "jsonl" in self.options.formats:
            path = self.run_dir / f"{self.options.basename}.jsonl"
            # whole lines only: a full disk never leaves a torn line (ExportError instead)
            self._jsonl = JsonlAppender(path)

    async def consume(self, group: EpisodeGroup) -> dict[str, Any]:
        """Turn a finished group into export rows (failed episodes too, marked)."""
        for ep in group.episodes:
            if ep.ok or self.options.include_failed:
                row = episode_to_row(ep, self.exp_id)
                self.rows.append(row)
                if self._jsonl is not None:
                    self._jsonl.write(row)
        return {"rows": len(self.rows)}

    async def close(self) -> dict[str, Any]:
        """Write every row to each configured format; return ``{format: path}`` (and
        ``skipped``: the formats left out for want of a package)."""
        assert self.run_dir is not None
        written: dict[str, Any] = {}
        if self._jsonl is not None:
            self._jsonl.close()
            self._jsonl = None
            written["jsonl"] = str(self.run_dir / f"{self.options.basename}.jsonl")
        if "parquet" in self.options.formats and "parquet" not in self.skipped:
            path = write_rows(self.rows, self.run_dir / f"{self.options.basename}.parquet")
            written["parquet"] = str(path)
        log.info("wrote %d episodes to %s", len(self.rows), ", ".join(written.values()))
        if self.skipped:
            written["skipped"] = list(self.skipped)
        return written


def _has_pyarrow() -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec("pyarrow") is not None
    except (ImportError, ValueError):
        return False
