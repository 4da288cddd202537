"""Describes the public shape of agentcore-rl-toolkit's top-level names (or rollhub.compat's).

Runs under either environment (it imports nothing from rollhub), so the 0.1.4 interpreter
can describe 0.1.4 for the comparison::

    python api_shape.py agentcore_rl_toolkit   # prints the description as JSON
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import sys
from typing import Any

#: Top-level names of upstream's that rollhub.compat does not offer (each with its reason
#: in the migration guide): none left.
NOT_OFFERED: tuple[str, ...] = ()
#: Public names upstream users import from submodules rather than the top level.
EXTRA = {"RolloutConfig": "agentcore_rl_toolkit.app"}


def _params(func: Any) -> list[list[Any]]:
    sig = inspect.signature(func)
    return [
        [p.name, p.kind.name, None if p.default is p.empty else repr(p.default)]
        for p in sig.parameters.values()
    ]


def describe_class(cls: type) -> dict[str, Any]:
    """Constructor parameters, public methods' parameters, properties, dataclass fields."""
    members: dict[str, Any] = {}
    for name, value in inspect.getmembers(cls):
        if name.startswith("_") and name not in (
            "__init__",
            "__call__",
            "__await__",
            "__iter__",
            "__aiter__",
        ):
            continue
        if name in ("__init__", "__call__") and value in (object.__init__, object.__call__):
            continue
        if isinstance(inspect.getattr_static(cls, name), property):
            members[name] = "property"
        elif inspect.isfunction(value) or inspect.ismethod(value):
            members[name] = _params(value)
    if dataclasses.is_dataclass(cls):
        members["<fields>"] = [
            [f.name, None if f.default is dataclasses.MISSING else repr(f.default)]
            for f in dataclasses.fields(cls)
        ]
    return members


def describe(module_name: str) -> dict[str, Any]:
    """Every offered top-level name of upstream: what ``module_name`` has under it."""
    upstream = importlib.import_module("agentcore_rl_toolkit")
    module = importlib.import_module(module_name)
    names = [n for n in upstream.__all__ if n not in NOT_OFFERED] + sorted(EXTRA)
    out: dict[str, Any] = {}
    for name in names:
        if module_name == "agentcore_rl_toolkit" and name in EXTRA:
            value = getattr(importlib.import_module(EXTRA[name]), name)
        else:
            value = getattr(module, name, None)
        out[name] = None if value is None else describe_class(value)
    return out


if __name__ == "__main__":
    print(
        json.dumps(
            {"all": importlib.import_module(sys.argv[1]).__all__, "shape": describe(sys.argv[1])}
        )
    )
