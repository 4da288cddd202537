"""Pydantic validation errors as one message that names each key and the fix.

Used for the config file (:mod:`rollhub.config`) and for each component's ``Options``
(:func:`rollhub.registry.build_options`), so both read the same.
"""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import BaseModel, ValidationError

__all__ = ["explain", "fields_at", "first_loc"]


def first_loc(exc: ValidationError, prefix: str | None = None) -> str:
    """The dotted location of the first error (under ``prefix``), for ``ConfigError.field``."""
    loc = ".".join(str(p) for p in exc.errors()[0]["loc"])
    return f"{prefix}.{loc}" if prefix else loc


def explain(
    exc: ValidationError, model: type[BaseModel], source: str, prefix: str | None = None
) -> str:
    """``source: `` + one clause per error: unknown keys with the valid ones, missing keys,
    bad values with what was given."""
    lines = []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"]]
        dotted = ".".join(([prefix] if prefix else []) + loc)
        if err["type"] == "extra_forbidden":
            valid = fields_at(model, err["loc"][:-1])
            hint = ""
            close = difflib.get_close_matches(loc[-1], valid, n=1)
            if close:
                hint = f" (did you mean {close[0]!r}?)"
            lines.append(
                f"unknown key {dotted!r}{hint}; valid keys here: {', '.join(sorted(valid)) or 'none'}"
            )
        elif err["type"] == "missing":
            lines.append(f"{dotted}: required; add it")
        else:
            got = err.get("input")
            shown = repr(got) if not isinstance(got, dict) else "a table"
            lines.append(f"{dotted}: {err['msg']} (got {shown})")
    return f"{source}: " + "; ".join(lines)


def fields_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The keys valid at ``loc`` inside ``model``."""
    current: Any = model
    for part in loc:
        field = getattr(current, "model_fields", {}).get(part)
        if field is None:
            return []
        current = field.annotation
    # base_dir is set by the loader, never written in the file
    return [f for f in getattr(current, "model_fields", {}) if f != "base_dir"]
