"""Prompt datasets: JSONL files of payloads, one prompt per line."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rollhub.errors import ConfigError, UsageError

__all__ = ["MAX_ID_CHARS", "group_id_of", "load_jsonl_dataset"]

#: longest prompt id: a session id adds ``-<sample>-<12 hex>`` and must stay a key part
MAX_ID_CHARS = 180


def load_jsonl_dataset(
    path: str | Path,
    *,
    id_field: str = "id",
    limit: int | None = None,
    field: str = "experiment.dataset",
) -> list[dict[str, Any]]:
    """Read payloads from a JSONL file; every line must be an object with ``id_field``.

    :raises ConfigError: missing file, a line that is not a JSON object, a missing or
        duplicate id, an id that cannot be a store key part (line number and field named).
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"dataset {str(p)!r} ({field}) does not exist", field=field)
    payloads: list[dict[str, Any]] = []
    seen: set[str] = set()
    with p.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{p}:{lineno}: not valid JSON: {exc.msg}", field=field) from None
            if not isinstance(obj, dict):
                raise ConfigError(f"{p}:{lineno}: each line must be a JSON object", field=field)
            pid = obj.get(id_field)
            if pid is None or str(pid) == "":
                raise ConfigError(
                    f"{p}:{lineno}: no {id_field!r} field (experiment.id_field names the prompt id)",
                    field="experiment.id_field",
                )
            _check_id(str(pid), p, lineno, id_field, field)
            if str(pid) in seen:
                raise ConfigError(f"{p}:{lineno}: duplicate id {pid!r}", field=field)
            seen.add(str(pid))
            payloads.append(obj)
            if limit is not None and len(payloads) >= limit:
                break
    if not payloads:
        raise ConfigError(f"dataset {str(p)!r} has no prompts", field=field)
    return payloads


def _check_id(pid: str, path: Path, lineno: int, id_field: str, field: str) -> None:
    """Ids become one part of store keys (``exp/ID/session.json``) and of session ids
    (``ID-<sample>-<12 hex>``): refuse what cannot be, before any worker starts."""
    from rollhub.rollout import validate_key_part

    try:
        validate_key_part(pid, id_field)
        if len(pid) > MAX_ID_CHARS:
            raise ValueError(f"{id_field}={pid[:20]!r}… is longer than {MAX_ID_CHARS} characters")
    except ValueError as exc:
        raise ConfigError(
            f"{path}:{lineno}: id {pid[:60]!r} cannot name a result: {exc}; rename it",
            field=field,
        ) from None


def group_id_of(payload: Mapping[str, Any], id_field: str) -> str:
    """The prompt id of a payload (its ``id_field``), required to be present."""
    value = payload.get(id_field)
    if value is None or value == "":
        raise UsageError(
            f"payload has no {id_field!r} field (experiment.id_field); every prompt needs a "
            f"stable id so its samples form one group and reruns can resume"
        )
    return str(value)
