"""Type aliases for JSON data: what ``json.loads`` returns and ``json.dumps`` takes."""

from __future__ import annotations

from typing import TypeAlias

__all__ = ["JSON", "JSONObject"]

#: Any JSON value (a tuple passes for a list when dumped, but is not one here).
JSON: TypeAlias = "dict[str, JSON] | list[JSON] | str | int | float | bool | None"
#: A JSON object.
JSONObject: TypeAlias = "dict[str, JSON]"
