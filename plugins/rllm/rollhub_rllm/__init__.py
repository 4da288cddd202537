"""rollhub-rllm: the ``rllm`` token source (rllm-model-gateway) and a remote runtime for
rLLM's trainer. See ``docs/backends/rllm.md``.

Names are imported on use, so ``import rollhub_rllm`` stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rollhub_rllm.remote_runtime import RollhubRemoteRuntime, install
    from rollhub_rllm.token_source import RllmTokenSource

__version__ = "0.1.0"

__all__ = ["RllmTokenSource", "RollhubRemoteRuntime", "install"]

_LAZY = {
    "RllmTokenSource": "rollhub_rllm.token_source",
    "RollhubRemoteRuntime": "rollhub_rllm.remote_runtime",
    "install": "rollhub_rllm.remote_runtime",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rollhub_rllm' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
