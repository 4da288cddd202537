"""Episodes on disk: one row per episode, in Parquet (pyarrow) and JSONL, schema version 1.

Columns (Parquet types; JSONL carries the same keys):

==================== ==================================================================
schema_version       int32 — this layout's version (1)
exp_id               string
episode_id           string — equals session_id
group_id             string — the prompt id (input_id); samples of a prompt share it
session_id           string
sample_index         int32
status               string — ok | agent_error | timeout | submit_error | cancelled |
                     store_error | infra_error
trainable            bool — after the failure policy
reward               float64, null when the rollout failed or gave no reward
reward_components    string (JSON object name → float)
error_type           string, null
error_message        string, null
error_traceback      string, null — the agent's traceback, when it raised
weight_version       int64, null
submitted_at         float64 (epoch s)
finished_at          float64 (epoch s)
elapsed_s            float64
num_turns            int32
num_sampled_tokens   int64
payload              string (JSON) — the prompt payload
result               string (JSON) — the agent's result document, null on failure
metrics              string (JSON)
traces               list<struct> — :class:`rollhub.trace.TraceRecord` fields; ``turns``
                     as list<struct>, ``metadata`` as JSON text
==================== ==================================================================

Free-form dicts are JSON text so the schema never changes with agent output. Load with
``pandas.read_parquet``, ``datasets.load_dataset("parquet", data_files=...)`` or
:func:`read_episodes`.

Readers never see a torn line: :func:`write_rows` writes a temporary file and renames it,
and :class:`JsonlAppender` (rows appended while a run goes on) cuts a line that could not
be written completely (a full disk) back off before it raises :class:`ExportError`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rollhub.episode import Episode, ErrorInfo
from rollhub.errors import ExportError, UsageError
from rollhub.trace import TraceRecord

if TYPE_CHECKING:
    import pyarrow as pa

EXPORT_SCHEMA_VERSION = 1

log = logging.getLogger(__name__)

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


def episode_to_row(episode: Episode, exp_id: str) -> dict[str, Any]:
    """One episode as a flat row of the export schema."""
    return {
        "schema_version": EXPORT_SCHEMA_VERSION,
        "exp_id": exp_id,
        "episode_id": episode.episode_id,
        "group_id": episode.group_id,
        "session_id": episode.session_id,
        "sample_index": episode.sample_index,
        "status": episode.status,
        "trainable": episode.trainable,
        "reward": episode.reward,
        "reward_components": json.dumps(episode.reward_components, sort_keys=True),
        "error_type": episode.error.type if episode.error else None,
        "error_message": episode.error.message if episode.error else None,
        "error_traceback": episode.error.traceback if episode.error else None,
        "weight_version": episode.weight_version,
        "submitted_at": episode.submitted_at,
        "finished_at": episode.finished_at,
        "elapsed_s": episode.elapsed,
        "num_turns": episode.num_turns,
        "num_sampled_tokens": episode.num_sampled_tokens,
        "payload": json.dumps(episode.payload, sort_keys=True, default=str),
        "result": None if episode.result is None else json.dumps(episode.result, sort_keys=True),
        "metrics": json.dumps(episode.metrics, sort_keys=True, default=str),
        "traces": [_trace_to_row(t) for t in episode.traces],
    }


def _trace_to_row(trace: TraceRecord) -> dict[str, Any]:
    data = trace.model_dump(mode="json")
    extra = {k: data.pop(k) for k in list(data) if k not in _TRACE_FIELDS}
    if extra.get("policy") is None:  # a run of one policy: records as they always were
        extra.pop("policy", None)
    data["metadata"] = json.dumps({**data.get("metadata", {}), **extra}, sort_keys=True)
    data["turns"] = [{k: t.get(k) for k in _TURN_FIELDS} for t in data["turns"]]
    return data


def episode_from_row(row: dict[str, Any]) -> Episode:
    """Rebuild an :class:`Episode` from a row (Parquet or JSONL)."""
    if row.get("schema_version") != EXPORT_SCHEMA_VERSION:
        raise UsageError(
            f"episode row has schema_version {row.get('schema_version')!r}; this rollhub reads "
            f"version {EXPORT_SCHEMA_VERSION}"
        )
    traces = []
    for t in row.get("traces") or []:
        t = dict(t)
        t["metadata"] = json.loads(t["metadata"]) if isinstance(t.get("metadata"), str) else {}
        if t["metadata"].get("policy") is not None:  # kept in metadata: the schema is fixed
            t["policy"] = t["metadata"].pop("policy")
            t["turns"] = [{**turn, "policy": t["policy"]} for turn in t.get("turns") or []]
        traces.append(TraceRecord.model_validate(t))
    error = (
        ErrorInfo(row["error_type"], row["error_message"] or "", row.get("error_traceback"))
        if row.get("error_type")
        else None
    )
    return Episode(
        episode_id=row["episode_id"],
        group_id=row["group_id"],
        session_id=row["session_id"],
        sample_index=row["sample_index"],
        status=row["status"],
        payload=json.loads(row["payload"]),
        result=None if row.get("result") is None else json.loads(row["result"]),
        reward=row.get("reward"),
        reward_components=json.loads(row["reward_components"]),
        error=error,
        traces=traces,
        weight_version=row.get("weight_version"),
        submitted_at=row.get("submitted_at"),
        finished_at=row.get("finished_at"),
        metrics=json.loads(row["metrics"]),
        trainable=bool(row["trainable"]),
    )


_TURN_FIELDS = (
    "turn_index",
    "start",
    "end",
    "finish_reason",
    "weight_version",
    "drift",
    "ill_formed",
    "masked_tokens",
)
_TRACE_FIELDS = (
    "schema_version",
    "session_id",
    "branch_id",
    "parent_branch_id",
    "fork_turn",
    "prompt_ids",
    "response_ids",
    "response_mask",
    "response_logprobs",
    "turns",
    "finish_reason",
    "model_id",
    "metadata",
)


def arrow_schema() -> pa.Schema:
    """The pyarrow schema of the Parquet export."""
    import pyarrow as pa

    turn = pa.struct(
        [
            ("turn_index", pa.int32()),
            ("start", pa.int64()),
            ("end", pa.int64()),
            ("finish_reason", pa.string()),
            ("weight_version", pa.int64()),
            ("drift", pa.string()),
            ("ill_formed", pa.bool_()),
            ("masked_tokens", pa.int64()),
        ]
    )
    trace = pa.struct(
        [
            ("schema_version", pa.int32()),
            ("session_id", pa.string()),
            ("branch_id", pa.int32()),
            ("parent_branch_id", pa.int32()),
            ("fork_turn", pa.int32()),
            ("prompt_ids", pa.list_(pa.int64())),
            ("response_ids", pa.list_(pa.int64())),
            ("response_mask", pa.list_(pa.int8())),
            ("response_logprobs", pa.list_(pa.float64())),
            ("turns", pa.list_(turn)),
            ("finish_reason", pa.string()),
            ("model_id", pa.string()),
            ("metadata", pa.string()),
        ]
    )
    return pa.schema(
        [
            ("schema_version", pa.int32()),
            ("exp_id", pa.string()),
            ("episode_id", pa.string()),
            ("group_id", pa.string()),
            ("session_id", pa.string()),
            ("sample_index", pa.int32()),
            ("status", pa.string()),
            ("trainable", pa.bool_()),
            ("reward", pa.float64()),
            ("reward_components", pa.string()),
            ("error_type", pa.string()),
            ("error_message", pa.string()),
            ("error_traceback", pa.string()),
            ("weight_version", pa.int64()),
            ("submitted_at", pa.float64()),
            ("finished_at", pa.float64()),
            ("elapsed_s", pa.float64()),
            ("num_turns", pa.int32()),
            ("num_sampled_tokens", pa.int64()),
            ("payload", pa.string()),
            ("result", pa.string()),
            ("metrics", pa.string()),
            ("traces", pa.list_(trace)),
        ]
    )


class JsonlAppender:
    """Append rows to a JSONL file, one complete line at a time.

    Each row goes out in one write and is flushed; when a write fails part-way the file is
    truncated back to the end of the last complete line, so the file stays readable.

    :param path: the ``.jsonl`` file (created, or truncated when ``append`` is False).
    :raises ExportError: from :meth:`write`, naming the file and the cause.
    """

    def __init__(self, path: str | Path, *, append: bool = False) -> None:
        self.path = Path(path)
        try:
            self._file = self.path.open("ab" if append else "wb")
        except OSError as exc:
            raise ExportError(
                f"cannot open {str(self.path)!r}: {exc}", path=str(self.path)
            ) from exc
        self._good = self._file.tell()

    def write(self, row: dict[str, Any]) -> None:
        """Append one row as one line."""
        line = (json.dumps(row, sort_keys=True) + "\n").encode("utf-8")
        try:
            self._file.write(line)
            self._file.flush()
        except OSError as exc:
            self._cut_back()
            raise ExportError(
                f"could not append to {str(self.path)!r}: {exc}; the file keeps its complete lines",
                path=str(self.path),
            ) from exc
        self._good += len(line)

    def _cut_back(self) -> None:
        try:
            # Drop what the buffer still holds, then cut the partial line off on disk.
            self._file.close()
        except OSError:
            pass
        try:
            with self.path.open("r+b") as fh:
                fh.truncate(self._good)
        except OSError as exc:  # pragma: no cover - the disk refuses even truncation
            log.error("could not cut the torn line off %s: %s", self.path, exc)
        self._file = self.path.open("ab")

    def close(self) -> None:
        """Flush and close the file."""
        try:
            self._file.close()
        except OSError as exc:
            self._cut_back()
            self._file.close()
            raise ExportError(
                f"could not finish {str(self.path)!r}: {exc}", path=str(self.path)
            ) from exc


def write_rows(rows: Iterable[dict[str, Any]], path: str | Path) -> Path:
    """Write rows to ``.parquet`` or ``.jsonl`` (chosen by suffix), atomically.

    :raises ExportError: the file could not be written (the old one, if any, is kept).
    """
    p = Path(path)
    rows = list(rows)
    try:
        return _write_rows(rows, p)
    except OSError as exc:
        for tmp in (p.with_suffix(".parquet.tmp"), p.with_suffix(".jsonl.tmp")):
            tmp.unlink(missing_ok=True)
        raise ExportError(f"could not write {str(p)!r}: {exc}", path=str(p)) from exc


def _write_rows(rows: list[dict[str, Any]], p: Path) -> Path:
    if p.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pylist(rows, schema=arrow_schema())
        tmp = p.with_suffix(".parquet.tmp")
        pq.write_table(table, tmp)
        tmp.replace(p)
    elif p.suffix == ".jsonl":
        tmp = p.with_suffix(".jsonl.tmp")
        with tmp.open("w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, sort_keys=True) + "\n")
        tmp.replace(p)
    else:
        raise UsageError(f"cannot write {str(p)!r}: use a .parquet or .jsonl file name")
    return p


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Read rows from ``.parquet`` or ``.jsonl``."""
    p = Path(path)
    if not p.exists():
        raise UsageError(f"episodes file {str(p)!r} does not exist")
    if p.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(p).to_pylist()
    if p.suffix == ".jsonl":
        with p.open(encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    raise UsageError(f"cannot read {str(p)!r}: use a .parquet or .jsonl file")


def read_episodes(path: str | Path) -> list[Episode]:
    """Episodes from an export file."""
    return [episode_from_row(r) for r in read_rows(path)]
