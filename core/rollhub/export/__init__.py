"""Episodes on disk: the export schema, its Parquet/JSONL files, and the ``export`` trainer.

The files' layout and readers are :mod:`rollhub.export.files` (re-exported here);
:mod:`rollhub.export.trainer` is the default trainer of ``rollhub run``, which writes them.
"""

from rollhub.export.files import (
    EXPORT_SCHEMA_VERSION,
    JsonlAppender,
    arrow_schema,
    episode_from_row,
    episode_to_row,
    read_episodes,
    read_rows,
    write_rows,
)

__all__ = [
    "EXPORT_SCHEMA_VERSION",
    "JsonlAppender",
    "arrow_schema",
    "episode_from_row",
    "episode_to_row",
    "read_episodes",
    "read_rows",
    "write_rows",
]
