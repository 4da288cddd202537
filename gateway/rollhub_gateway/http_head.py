"""Reading a plain HTTP/1.1 request head, and finding the route it names, for the fast
path (:mod:`rollhub_gateway.fast_path`).

"Plain" is deliberately narrow: whatever this module does not accept, aiohttp reads, so
the two never frame one request differently.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from multidict import CIMultiDict

__all__ = ["MAX_HEADERS", "Handler", "RequestHead", "Resolver", "parse_head", "route_table"]

MAX_HEADERS = 100

# one request head, checked whole: the request line, then field lines of a token name and
# a value of visible characters, spaces and tabs (no obs-fold, no bare CR or LF)
_HEAD = re.compile(
    r"(GET|POST|PUT|DELETE) (/[!-~]*) HTTP/1\.1"
    r"((?:\r\n[!#$%&'*+.^_`|~0-9A-Za-z-]+:[\t\x20-\x7e\x80-\xff]*)*)"
)
# the fields of a head _HEAD matched: name, and value without the spaces around it
_FIELD = re.compile(r"\r\n([^:\r]+):[ \t]*((?:[^\r]*[^\r \t])?)[ \t]*")
_DIGITS = re.compile(r"[0-9]{1,18}")
#: fields whose meaning this path leaves to aiohttp
_LEFT_TO_AIOHTTP = ("transfer-encoding", "expect", "upgrade", "content-encoding")
#: a route's handler: the gateway's aiohttp handler, called with a fast path request
Handler = Callable[[Any], Awaitable[Any]]
#: ``(method, path) -> (handler, route name for metrics, path parameters)``, or None for
#: a route left to aiohttp
Resolver = Callable[[str, str], "tuple[Handler, str, dict[str, str]] | None"]


def route_table(routes: list[tuple[str, str, Handler]]) -> Resolver:
    """A :data:`Resolver` of ``(method, path pattern, handler)`` routes; a ``{name}`` in a
    pattern matches one path segment, as in aiohttp."""
    static: dict[tuple[str, str], tuple[Handler, str, dict[str, str]]] = {}
    dynamic: list[tuple[str, re.Pattern[str], Handler, str]] = []
    for method, pattern, handler in routes:
        if "{" not in pattern:
            static[(method, pattern)] = (handler, pattern, {})
        else:
            parts = re.split(r"\{(\w+)\}", pattern)
            regex = "".join(
                f"(?P<{p}>[^{{}}/]+)" if i % 2 else re.escape(p) for i, p in enumerate(parts)
            )
            dynamic.append((method, re.compile(regex), handler, pattern))

    def resolve(method: str, path: str) -> tuple[Handler, str, dict[str, str]] | None:
        hit = static.get((method, path))
        if hit is not None:
            return hit
        for m, regex, handler, pattern in dynamic:
            match = regex.fullmatch(path) if m == method else None
            if match is not None:
                return handler, pattern, match.groupdict()
        return None

    return resolve


class RequestHead(NamedTuple):
    """A plain request's head."""

    method: str
    #: the target without its query (no route reads one)
    path: str
    headers: CIMultiDict[str]
    #: the body's length (0 without ``Content-Length``)
    length: int
    #: whether the client asked to close the connection after the answer
    close: bool


def parse_head(head: bytes) -> RequestHead | None:
    """The head of a plain request, or None for anything the fast path leaves to aiohttp."""
    m = _HEAD.fullmatch(head.decode("latin-1"))
    if m is None or "%" in m.group(2):
        return None
    fields = _FIELD.findall(m.group(3))
    if len(fields) > MAX_HEADERS:
        return None
    headers: CIMultiDict[str] = CIMultiDict(fields)
    if any(name in headers for name in _LEFT_TO_AIOHTTP):
        return None
    lengths = headers.getall("Content-Length", ())
    if len(lengths) > 1 or (lengths and not _DIGITS.fullmatch(lengths[0])):
        return None
    method = m.group(1)
    if not lengths and method in ("POST", "PUT"):
        return None  # a body without a length: aiohttp decides what it means
    tokens = {t.strip().lower() for v in headers.getall("Connection", ()) for t in v.split(",")}
    if "upgrade" in tokens:
        return None
    path = m.group(2).partition("?")[0]
    return RequestHead(method, path, headers, int(lengths[0]) if lengths else 0, "close" in tokens)
