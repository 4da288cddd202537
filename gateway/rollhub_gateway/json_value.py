"""The type of a JSON value: what ``json.loads`` gives, and what tool-call arguments hold."""

from __future__ import annotations

from typing import TypeAlias

__all__ = ["JSON"]

#: a JSON value (objects have string keys)
JSON: TypeAlias = "dict[str, JSON] | list[JSON] | str | int | float | bool | None"
