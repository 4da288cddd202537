"""Reading a request's tools and its ``tool_choice``, in every wire format: a tool's schema
must be an object, and a forced tool must be one the request declares. A template renders
whatever it is given, so a shape it does not expect would silently become a different
prompt than the agent meant, or a choice the model can never satisfy."""

from __future__ import annotations

import logging
from typing import Any

from rollhub_gateway.protocols.base import WireError, function_tool
from rollhub_gateway.turns import ToolChoice

__all__ = ["checked_tool", "checked_tool_choice"]

log = logging.getLogger(__name__)


def checked_tool(
    name: str, parameters: object, description: object, *, where: str, schema: str
) -> dict[str, Any]:
    """A tool in neutral form (:func:`~.base.function_tool`) after checking its fields.

    :param where: the tool's field path (``tools[0].function``, ``tools[0]``).
    :param schema: the wire name of its JSON Schema (``parameters``, ``input_schema``).
    :raises WireError: 400 naming ``where.schema`` or ``where.description``.
    """
    if parameters is not None and not isinstance(parameters, dict):
        raise WireError(
            "invalid_request",
            f"{where}.{schema} must be a JSON Schema object, got {type(parameters).__name__}; "
            'send e.g. {"type": "object", "properties": {}} or leave it out',
            param=f"{where}.{schema}",
        )
    if description is not None and not isinstance(description, str):
        raise WireError(
            "invalid_request",
            f"{where}.description must be a string, got {type(description).__name__}",
            param=f"{where}.description",
        )
    return function_tool(name, parameters, description)


def checked_tool_choice(choice: ToolChoice, tools: list[dict[str, Any]] | None) -> ToolChoice:
    """``choice`` (neutral form), once a forced function names a tool in ``tools``.

    :raises WireError: 400 naming ``tool_choice``: a function choice without a string
        name, or naming no declared tool.
    """
    if not isinstance(choice, dict):
        return choice
    fn = choice.get("function")
    name = fn.get("name") if isinstance(fn, dict) else None
    if choice.get("type") != "function" or not isinstance(name, str) or not name:
        raise WireError(
            "invalid_request",
            "'tool_choice' must name a function by a string: "
            '{"type": "function", "function": {"name": "<a tool in tools>"}}',
            param="tool_choice",
        )
    declared = [t["function"]["name"] for t in tools or ()]
    if name not in declared:
        raise WireError(
            "invalid_request",
            f"'tool_choice' forces the function {name!r}, which is not in 'tools' "
            f"(declared: {declared or 'none'}); declare it or choose 'auto'",
            param="tool_choice",
        )
    return choice
