"""slime's eval datasets (``--eval-prompt-data`` / ``--eval-config``) as prompt groups.

Files are read the way slime's ``slime/utils/data.py::read_file`` reads them: ``.jsonl``
(blank lines skipped) or ``.parquet`` (every row group), optionally narrowed with slime's
row slice suffix ``path@[start:end]`` (negative bounds count from the end). Each row
becomes a prompt ``Sample`` keyed by the dataset's ``input_key``/``label_key``/
``metadata_key``, falling back to slime's ``--input-key``/``--label-key``/``--metadata-key``;
the dataset's ``rm_type`` and ``metadata_overrides`` are merged into its metadata as slime
merges them. What rollhub does with the dataset's other fields (sampling honoured; slime's
own generation and reward machinery, ``custom_rm_path`` included, refused) is in
:mod:`rollhub_slime.eval_options`.
"""

from __future__ import annotations

import copy
import itertools
import json
import logging
import re
from argparse import Namespace
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rollhub.errors import ConfigError

from rollhub_slime.eval_options import eval_metadata
from rollhub_slime.slime_types import EvalDataset, Sample

log = logging.getLogger(__name__)

__all__ = ["eval_groups", "read_rows"]

_SLICE = re.compile(r"^(?P<path>.*)@\[(?P<start>-?\d*):(?P<end>-?\d*)\]$")
_FIELD = "eval_prompt_data"


def eval_groups(cfg: EvalDataset, args: Namespace,
                sample_cls: Callable[..., Sample]) -> list[list[Sample]]:
    """One group per prompt of the dataset: ``n_samples_per_eval_prompt`` copies each.

    Copies are numbered with a global ``index`` (prompt-major), the prompt's position is its
    ``group_index``, as slime numbers eval samples. Each sample's metadata is the row's
    ``metadata_key`` value with the dataset's ``rm_type`` and ``metadata_overrides`` merged
    in (:func:`~rollhub_slime.eval_options.eval_metadata`).

    :param cfg: one of slime's ``args.eval_datasets`` (an ``EvalDatasetConfig``).
    :param args: slime's parsed arguments (key and sample-count fallbacks).
    :param sample_cls: slime's ``Sample``.
    :raises ConfigError: the file is missing, not JSONL or Parquet, or unreadable.
    """
    n = cfg.n_samples_per_eval_prompt or getattr(args, "n_samples_per_eval_prompt", 1) or 1
    input_key = cfg.input_key or getattr(args, "input_key", None) or "input"
    label_key = cfg.label_key or getattr(args, "label_key", None)
    metadata_key = cfg.metadata_key or getattr(args, "metadata_key", None) or "metadata"
    groups = []
    for i, row in enumerate(read_rows(cfg.name, cfg.path)):
        prompt = sample_cls(
            group_index=i,
            prompt=row.get(input_key, ""),
            label=row.get(label_key) if label_key else None,
            metadata=eval_metadata(cfg, row.get(metadata_key)),
        )
        group = [copy.deepcopy(prompt) for _ in range(n)]
        for j, sample in enumerate(group):
            sample.index = i * n + j
        groups.append(group)
    return groups


def read_rows(name: str, spec: str) -> list[dict[str, Any]]:
    """The rows of an eval dataset file, ``path`` or ``path@[start:end]``.

    :raises ConfigError: as :func:`eval_groups`.
    """
    match = _SLICE.match(spec)
    path = Path(match["path"] if match else spec)
    if not path.is_file():
        raise ConfigError(f"eval dataset {name!r}: no file {str(path)!r}", field=_FIELD)
    if path.suffix == ".jsonl":
        rows: Iterator[dict[str, Any]] = _jsonl_rows(name, path)
    elif path.suffix == ".parquet":
        rows = _parquet_rows(name, path)
    else:
        raise ConfigError(
            f"eval dataset {name!r}: {str(path)!r} is neither .jsonl nor .parquet; slime "
            f"reads eval data as .jsonl or .parquet",
            field=_FIELD,
        )
    if match is None:
        return list(rows)
    start = int(match["start"]) if match["start"] else None
    end = int(match["end"]) if match["end"] else None
    if (start or 0) < 0 or (end or 0) < 0:
        return list(rows)[start:end]
    return list(itertools.islice(rows, start, end))


def _jsonl_rows(name: str, path: Path) -> Iterator[dict[str, Any]]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"eval dataset {name!r}: cannot read {str(path)!r}: {exc}", field=_FIELD
        ) from exc
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            yield json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"eval dataset {name!r}: line {number} of {path} is not JSON: {exc}",
                field=_FIELD,
            ) from exc


def _parquet_rows(name: str, path: Path) -> Iterator[dict[str, Any]]:
    try:  # an optional dependency, as it is for slime: only Parquet datasets need it
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ConfigError(
            f"eval dataset {name!r}: reading {str(path)!r} needs pyarrow; "
            f"pip install 'rollhub-slime[parquet]'",
            field=_FIELD,
        ) from exc
    try:
        parquet = pq.ParquetFile(path)
        batches = list(parquet.iter_batches())
    except (OSError, pa.ArrowException) as exc:
        raise ConfigError(
            f"eval dataset {name!r}: cannot read {str(path)!r} as Parquet: {exc}", field=_FIELD
        ) from exc
    for batch in batches:
        yield from batch.to_pylist()
