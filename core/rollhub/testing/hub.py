"""A hub for plugin tests: built-ins plus the given in-memory plugins, no entry-point scan.

Example::

    from rollhub.testing import make_hub

    async def test_my_reward_plugin(tmp_path):
        hub = make_hub({"runtime": {"app": "agent.py:app"}}, my_plugin, run_dir=tmp_path)
        async with hub:
            group = await hub.run_group({"id": "p1"}, n=2)
        assert all(e.reward_components["mine"] == 1.0 for e in group.episodes)
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from rollhub.config import RollhubConfig, parse_config
from rollhub.hubs.async_hub import AsyncHub
from rollhub.plugins import PluginHost, build_host

__all__ = ["make_host", "make_hub"]


def make_host(*plugins: ModuleType | object) -> PluginHost:
    """The core's built-in plugins plus ``plugins``; installed plugins are not loaded."""
    return build_host(entry_points=False, plugins=plugins)


def make_hub(
    config: RollhubConfig | Mapping[str, Any],
    *plugins: ModuleType | object,
    run_dir: str | Path | None = None,
) -> AsyncHub:
    """An :class:`AsyncHub` over :func:`make_host`; ``config`` may be plain data.

    Environment variables do not override plain-data configs here, so tests stay
    independent of the shell they run in.
    """
    cfg = config if isinstance(config, RollhubConfig) else parse_config(config, env={})
    return AsyncHub(cfg, host=make_host(*plugins), run_dir=Path(run_dir) if run_dir else None)
