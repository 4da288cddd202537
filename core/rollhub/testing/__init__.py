"""Helpers for testing rollhub and rollhub plugins against real local services.

- :func:`rollhub.testing.seaweedfs.seaweedfs_server`: a throwaway S3 endpoint (SeaweedFS).
- :func:`rollhub.testing.servers.serve_app`: any ASGI app (a ``RolloutApp``) served by
  uvicorn on a free loopback port, in a background thread.
- :func:`rollhub.testing.hub.make_hub` / :func:`~rollhub.testing.hub.make_host`: a hub built
  from the core's plugins plus in-memory ones, without scanning installed entry points.

Submodules are imported on use; nothing here runs at ``import rollhub``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the names __getattr__ loads on first use, for type checkers
    from rollhub.testing.hub import make_host as make_host
    from rollhub.testing.hub import make_hub as make_hub
    from rollhub.testing.seaweedfs import seaweedfs_server as seaweedfs_server
    from rollhub.testing.servers import serve_app as serve_app

__all__ = ["make_host", "make_hub", "seaweedfs_server", "serve_app"]

_LAZY = {
    "make_host": "rollhub.testing.hub",
    "make_hub": "rollhub.testing.hub",
    "seaweedfs_server": "rollhub.testing.seaweedfs",
    "serve_app": "rollhub.testing.servers",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rollhub.testing' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
