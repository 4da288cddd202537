"""Which installed distribution provides a plugin's entry point, for ``rollhub plugins``
and for the errors that name what to reinstall.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

__all__ = ["ENTRY_POINT_GROUP", "distribution_of"]

#: the entry-point group installed plugins are listed under
ENTRY_POINT_GROUP = "rollhub"


def distribution_of(ep: EntryPoint) -> tuple[str | None, str | None]:
    """The distribution (name, version) that provides an entry point."""
    from importlib import metadata

    dist = getattr(ep, "dist", None)
    if dist is not None:
        return dist.metadata["Name"], dist.version
    top = ep.value.split(":")[0].split(".")[0]
    names = _packages_distributions().get(top)
    if not names:
        return None, None
    try:
        return names[0], metadata.version(names[0])
    except metadata.PackageNotFoundError:
        return names[0], None


_PKG_DISTS: dict[str, list[str]] | None = None


def _packages_distributions() -> dict[str, list[str]]:
    """Top-level package -> the distributions providing it, read once per process."""
    global _PKG_DISTS
    if _PKG_DISTS is None:
        from importlib import metadata

        _PKG_DISTS = dict(metadata.packages_distributions())
        # Editable installs expose no top-level names; read them from the entry points.
        for dist in metadata.distributions():
            for ep in dist.entry_points:
                if ep.group == ENTRY_POINT_GROUP:
                    top = ep.value.split(":")[0].split(".")[0]
                    _PKG_DISTS.setdefault(top, [dist.metadata["Name"]])
    return _PKG_DISTS
