"""Reading a plain HTTP/1.1 request head, and finding the route it names, for the fast
path (:mod:`rollhub_gateway.http.fast_path`).

"Plain" is deliberately narrow: whatever this module does not accept, aiohttp reads. The
head is parsed by llhttp (through ``httptools``), the parser aiohttp's own C parser is built
on, so the two never frame one request differently. It costs what the regular expressions
it replaced cost (9-16 vs 8-19 µs for a turn's head on the 2-core machine, three rounds of
``bench/bench_gateway_libraries.py``).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

import httptools
from multidict import CIMultiDict

__all__ = ["MAX_HEADERS", "Handler", "RequestHead", "Resolver", "parse_head", "route_table"]

MAX_HEADERS = 100

_METHODS = frozenset({"GET", "POST", "PUT", "DELETE"})
#: a request target the fast path routes: an absolute path of visible characters
_TARGET = re.compile(r"/[!-~]*")
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


class _Head:
    """httptools callbacks collecting one request head."""

    __slots__ = ("fields", "url")

    def __init__(self) -> None:
        self.url = b""
        self.fields: list[tuple[str, str]] = []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.fields.append((name.decode("latin-1"), value.decode("latin-1").strip(" \t")))


def parse_head(head: bytes) -> RequestHead | None:
    """The head of a plain request (without its final blank line), or None for anything
    the fast path leaves to aiohttp."""
    got = _Head()
    parser = httptools.HttpRequestParser(got)
    try:
        parser.feed_data(head + b"\r\n\r\n")
    except (httptools.HttpParserError, httptools.HttpParserUpgrade):  # aiohttp answers these
        return None
    method = parser.get_method().decode("latin-1")
    url = got.url.decode("latin-1")
    if (
        method not in _METHODS
        or parser.get_http_version() != "1.1"
        or not _TARGET.fullmatch(url)
        or "%" in url
        or len(got.fields) > MAX_HEADERS
    ):
        return None
    headers: CIMultiDict[str] = CIMultiDict(got.fields)
    if any(name in headers for name in _LEFT_TO_AIOHTTP):
        return None
    lengths = headers.getall("Content-Length", ())
    if len(lengths) > 1 or (
        lengths and not (lengths[0].isdigit() and lengths[0].isascii() and len(lengths[0]) <= 18)
    ):
        return None
    if not lengths and method in ("POST", "PUT"):
        return None  # a body without a length: aiohttp decides what it means
    tokens = {t.strip().lower() for v in headers.getall("Connection", ()) for t in v.split(",")}
    if "upgrade" in tokens:
        return None
    path = url.partition("?")[0]
    return RequestHead(method, path, headers, int(lengths[0]) if lengths else 0, "close" in tokens)
