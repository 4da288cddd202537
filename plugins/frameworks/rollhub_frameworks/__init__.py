"""rollhub-frameworks: the rollhub agent-framework adapters.

``strands_model(context.rollout)`` and ``langgraph_chat_model(context.rollout)`` build a
framework's model for the rollout's endpoint. They are loaded on first use, and the
frameworks themselves only when a model is built, so importing this package stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rollhub_frameworks.langgraph import LangGraphFramework, langgraph_chat_model
    from rollhub_frameworks.strands import StrandsFramework, strands_model

__version__ = "0.1.0"

__all__ = ["LangGraphFramework", "StrandsFramework", "langgraph_chat_model", "strands_model"]

_LAZY = {
    "strands_model": "rollhub_frameworks.strands",
    "StrandsFramework": "rollhub_frameworks.strands",
    "langgraph_chat_model": "rollhub_frameworks.langgraph",
    "LangGraphFramework": "rollhub_frameworks.langgraph",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rollhub_frameworks' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
