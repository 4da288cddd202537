"""Prompt datasets: JSONL files of payloads, one prompt per line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rollhub.errors import ConfigError

__all__ = ["load_jsonl_dataset"]


def load_jsonl_dataset(
    path: str | Path, *, id_field: str = "id", limit: int | None = None
) -> list[dict[str, Any]]:
    """Read payloads from a JSONL file; every line must be an object with ``id_field``.

    :raises ConfigError: missing file, a line that is not a JSON object, a missing or
        duplicate id, an id that cannot be a store key part (line number and field named).
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"dataset {str(p)!r} (experiment.dataset) does not exist", field="experiment.dataset")
    payloads: list[dict[str, Any]] = []
    seen: set[str] = set()
    with p.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{p}:{lineno}: not valid JSON: {exc.msg}", field="experiment.dataset") from None
            if not isinstance(obj, dict):
                raise ConfigError(f"{p}:{lineno}: each line must be a JSON object", field="experiment.dataset")
            pid = obj.get(id_field)
            if pid is None or str(pid) == "":
                raise ConfigError(
                    f"{p}:{lineno}: no {id_field!r} field (experiment.id_field names the prompt id)",
                    field="experiment.id_field",
                )
            _check_id(str(pid), p, lineno, id_field)
            if str(pid) in seen:
                raise ConfigError(f"{p}:{lineno}: duplicate id {pid!r}", field="experiment.dataset")
            seen.add(str(pid))
            payloads.append(obj)
            if limit is not None and len(payloads) >= limit:
                break
    if not payloads:
        raise ConfigError(f"dataset {str(p)!r} has no prompts", field="experiment.dataset")
    return payloads


def _check_id(pid: str, path: Path, lineno: int, id_field: str) -> None:
    """Ids become one part of store keys (``exp/ID/session.json``): refuse what cannot be."""
    from rollhub.stores import InvalidKeyError, check_key

    try:
        check_key(pid)
        if "/" in pid:
            raise InvalidKeyError("contains '/'", key=pid)
    except InvalidKeyError:
        raise ConfigError(
            f"{path}:{lineno}: id {pid!r} ({id_field!r}) cannot name a result: ids must not "
            f"be '.' or '..' nor contain '/', a backslash or a NUL byte; rename it",
            field="experiment.dataset",
        ) from None
