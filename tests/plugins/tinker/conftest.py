"""Fixtures of the Tinker tests: the local Tinker-compatible server (see local_server.py)."""

from tests.plugins.tinker.local_server import (  # noqa: F401 - fixtures for this folder
    tinker_local_env,
    tinker_server_factory,
)
