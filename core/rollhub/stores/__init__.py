"""Result stores: where agents write their results and the client reads them.

A store is chosen by the scheme of its URL: ``file://DIR`` (:class:`FileResultStore`, the
embedded default) or ``s3://bucket/prefix`` (:class:`S3ResultStore`, any S3-compatible
service). Plugins may register more schemes through ``registry.add_store(cls)``; pass the
host's registry to :func:`open_store` to see them.

Keys are relative, slash-separated paths (``{exp_id}/{input_id}/{session_id}.json``).
:func:`check_key` rejects anything that could leave the store's root.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from rollhub.errors import StoreError, UnknownComponentError
from rollhub.stores.base import BUILTIN_SCHEMES, ResultStore

if TYPE_CHECKING:
    from rollhub.registry import ComponentLookup

__all__ = ["BUILTIN_SCHEMES", "InvalidKeyError", "check_key", "open_store", "store_scheme"]

log = logging.getLogger(__name__)

class InvalidKeyError(StoreError, ValueError):
    """A store key that is empty, absolute, contains ``..``, NUL or a backslash.

    Context: ``key``.
    """


def check_key(key: str) -> str:
    """Return ``key`` when it is a safe relative store key, else raise :class:`InvalidKeyError`.

    A safe key is a non-empty string of ``/``-separated parts, none of them empty, ``.`` or
    ``..``, with no leading ``/``, no backslash and no NUL byte.
    """
    if not isinstance(key, str) or not key:
        raise InvalidKeyError(f"store key {key!r} is empty or not a string", key=key)
    reason = None
    if "\x00" in key:
        reason = "contains a NUL byte"
    elif "\\" in key:
        reason = "contains a backslash; use '/' between parts"
    elif key.startswith("/"):
        reason = "is absolute; keys are relative to the store root"
    else:
        parts = key.split("/")
        if any(p in ("", ".", "..") for p in parts):
            reason = "has an empty, '.' or '..' part; keys cannot leave the store root"
    if reason is not None:
        raise InvalidKeyError(f"store key {key!r} {reason}", key=key)
    return key


def check_prefix(prefix: str) -> str:
    """Like :func:`check_key`, for a list prefix: empty is allowed, a trailing ``/`` too."""
    if prefix == "":
        return prefix
    check_key(prefix.rstrip("/") or "/")
    return prefix


def store_scheme(url: str) -> str:
    """The scheme of a store URL (``file``, ``s3``), validated to be present."""
    if not isinstance(url, str) or "://" not in url:
        raise UnknownComponentError(
            f"store URL {url!r} has no scheme; use file://DIR or s3://bucket/prefix",
            kind="store",
            name=str(url),
            installed=sorted(BUILTIN_SCHEMES),
        )
    return url.split("://", 1)[0].lower()


def open_store(
    url: str,
    registry: ComponentLookup | None = None,
    **options: object,
) -> ResultStore:
    """Open the result store a URL names.

    :param url: ``file://DIR`` (relative to the working directory unless DIR starts with
        ``/``) or ``s3://bucket/prefix``, or a scheme a plugin registered.
    :param registry: a :class:`~rollhub.registry.ComponentRegistry` or
        :class:`~rollhub.plugins.PluginHost` whose registered stores to use; without one,
        the built-in stores.
    :param options: passed to the store's ``from_url`` (e.g. ``endpoint_url`` for S3).
    :raises UnknownComponentError: no store serves the scheme; the message lists the valid ones.

    Example::

        store = open_store("file://runs/results")
        store.put("exp/q1/s1.json", {"rewards": 1.0})
    """
    scheme = store_scheme(url)
    if registry is not None:
        # a PluginHost stands for its registry
        reg: ComponentLookup = getattr(registry, "registry", registry)
        cls = reg.get("store", scheme, field="store URL scheme")
    else:
        target = BUILTIN_SCHEMES.get(scheme)
        if target is None:
            raise UnknownComponentError(
                f"no result store serves {scheme}:// (store URL {url!r}); "
                f"valid schemes: {', '.join(s + '://' for s in sorted(BUILTIN_SCHEMES))}",
                kind="store",
                name=scheme,
                installed=sorted(BUILTIN_SCHEMES),
            )
        import importlib

        modname, clsname = target.split(":")
        cls = getattr(importlib.import_module(modname), clsname)
    log.debug("opening %s store for %s", scheme, url)
    store_cls: type[ResultStore] = cls
    return store_cls.from_url(url, **options)
