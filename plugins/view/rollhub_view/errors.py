"""Errors of rollhub-view: usage errors, some of which mean "there is no such thing"."""

from __future__ import annotations

from rollhub.errors import UsageError

__all__ = ["NotFound", "UsageError"]


class NotFound(UsageError):
    """A run, episode, group or file the request names does not exist (HTTP 404)."""
