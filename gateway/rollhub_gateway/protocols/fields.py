"""Reading a request body's fields: each reader checks one field's type and range and
names the field in the 400 it raises. Used by the request parsers (``*_input`` modules)."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from typing import Any, TypeVar, overload

from rollhub_gateway.protocols.base import WireError

__all__ = ["json_text", "opt_bool", "opt_float", "opt_int", "opt_stop", "opt_str", "require"]

log = logging.getLogger(__name__)

T = TypeVar("T")


@overload
def require(body: Mapping[str, Any], name: str, kind: type[T]) -> T: ...


@overload
def require(body: Mapping[str, Any], name: str, kind: tuple[type, ...]) -> object: ...


def require(body: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> object:
    """``body[name]``, which must be present and of ``kind``."""
    if name not in body or body[name] is None:
        raise WireError("invalid_request", f"missing required field {name!r}", param=name)
    value = body[name]
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _tuple(kind)):
        raise WireError(
            "invalid_request",
            f"field {name!r} must be {_kind_name(kind)}, got {type(value).__name__}",
            param=name,
        )
    return value


def opt_int(
    body: Mapping[str, Any], name: str, *, minimum: int | None = None, maximum: int | None = None
) -> int | None:
    """An optional integer field within bounds."""
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise WireError("invalid_request", f"field {name!r} must be an integer", param=name)
    if minimum is not None and value < minimum:
        raise WireError("invalid_request", f"field {name!r} must be >= {minimum}", param=name)
    if maximum is not None and value > maximum:
        raise WireError("invalid_request", f"field {name!r} must be <= {maximum}", param=name)
    return value


def opt_float(
    body: Mapping[str, Any],
    name: str,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    above: float | None = None,
) -> float | None:
    """An optional finite number field within ``[minimum, maximum]`` (``above``: a lower
    bound the value must exceed, as ``top_p > 0``)."""
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise WireError("invalid_request", f"field {name!r} must be a number", param=name)
    # NaN passes every comparison below unnoticed, and one row's NaN or infinity would
    # reach the sampler of a batch other sessions share
    if isinstance(value, float) and not math.isfinite(value):
        raise WireError(
            "invalid_request",
            f"field {name!r} must be a finite number, got {value}; send a number such as 1.0",
            param=name,
        )
    low = above if above is not None else minimum
    if (
        (minimum is not None and value < minimum)
        or (above is not None and value <= above)
        or (maximum is not None and value > maximum)
    ):
        left = "(" if above is not None else "["
        raise WireError(
            "invalid_request",
            f"field {name!r}={value} is outside {left}{low}, {maximum}]; send a value in "
            "that range",
            param=name,
        )
    return float(value)


def opt_bool(body: Mapping[str, Any], name: str) -> bool | None:
    """An optional boolean field."""
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, bool):
        raise WireError("invalid_request", f"field {name!r} must be true or false", param=name)
    return value


def opt_stop(body: Mapping[str, Any], name: str) -> tuple[str, ...] | None:
    """An optional stop field: a non-empty string or a list of them."""
    value = body.get(name)
    if value is None:
        return None
    stops = (value,) if isinstance(value, str) else value
    if not isinstance(stops, list | tuple) or not all(isinstance(s, str) for s in stops):
        raise WireError(
            "invalid_request", f"field {name!r} must be a string or list of strings", param=name
        )
    # "" occurs in every text: an engine would stop after the first token
    if "" in stops:
        raise WireError(
            "invalid_request",
            f"field {name!r} holds an empty string, which would end every output at its "
            "first token; remove it",
            param=name,
        )
    return tuple(stops)


def opt_str(body: Mapping[str, Any], name: str) -> str | None:
    """An optional string field."""
    value = body.get(name)
    if value is None or isinstance(value, str):
        return value
    raise WireError(
        "invalid_request",
        f"field {name!r} must be a string, got {type(value).__name__}",
        param=name,
    )


def json_text(value: object, name: str) -> str:
    """Tool-call arguments as JSON text (objects are serialised, text is kept as sent)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise WireError(
            "invalid_request", f"field {name!r} is not JSON-serialisable", param=name
        ) from exc


def _tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {
        str: "a string",
        list: "an array",
        dict: "an object",
        int: "an integer",
        bool: "a boolean",
    }
    return " or ".join(names.get(k, k.__name__) for k in _tuple(kind))
