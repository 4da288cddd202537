"""The pluggy markers of the ``rollhub`` project.

Kept in their own tiny module so that ``from rollhub import hookimpl`` costs only pluggy.
"""

from __future__ import annotations

import pluggy

PROJECT_NAME = "rollhub"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)

__all__ = ["PROJECT_NAME", "hookimpl", "hookspec"]
