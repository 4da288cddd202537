"""Which request heads the fast path reads itself (llhttp through httptools) and which it
leaves to aiohttp."""

from __future__ import annotations

import pytest
from rollhub_gateway.http.request_head import parse_head

POST = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5"

LEFT_TO_AIOHTTP = {
    "HTTP/1.0": b"GET /healthz HTTP/1.0\r\nHost: x",
    "a method no route has": b"PATCH /sessions/a HTTP/1.1\r\nContent-Length: 0",
    "HEAD": b"HEAD /healthz HTTP/1.1\r\nHost: x",
    "an absolute URI": b"GET http://x/healthz HTTP/1.1\r\nHost: x",
    "a percent-encoded path": b"GET /sessions/a%2Fb/traces HTTP/1.1\r\nHost: x",
    "an obs-fold": POST + b"\r\nX-A: a\r\n b",
    "a bare LF": b"GET /healthz HTTP/1.1\nHost: x",
    "a bare CR in a value": b"GET /healthz HTTP/1.1\r\nX: a\rb",
    "a control character in a value": b"GET /healthz HTTP/1.1\r\nX: a\x01b",
    "a space before the colon": b"GET /healthz HTTP/1.1\r\nHost : x",
    "a bad field name": b"GET /healthz HTTP/1.1\r\nX(y): a",
    "two Content-Lengths": POST + b"\r\nContent-Length: 5",
    "a signed Content-Length": b"POST /v1/messages HTTP/1.1\r\nContent-Length: +5",
    "a 19-digit Content-Length": b"POST /v1/messages HTTP/1.1\r\nContent-Length: " + b"1" * 19,
    "a POST without a length": b"POST /v1/messages HTTP/1.1\r\nHost: x",
    "Transfer-Encoding": POST + b"\r\nTransfer-Encoding: chunked",
    "Expect": POST + b"\r\nExpect: 100-continue",
    "an upgrade": b"GET /healthz HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket",
}


@pytest.mark.parametrize("head", LEFT_TO_AIOHTTP.values(), ids=list(LEFT_TO_AIOHTTP))
def test_heads_the_fast_path_leaves_to_aiohttp(head: bytes) -> None:
    assert parse_head(head) is None


def test_a_plain_post_is_read() -> None:
    head = parse_head(POST + b"\r\nAuthorization: Bearer k \r\nX-Tab:\ta b\t")
    assert head is not None
    assert (head.method, head.path, head.length, head.close) == (
        "POST", "/v1/chat/completions", 5, False,
    )  # fmt: skip
    assert head.headers["authorization"] == "Bearer k"
    assert head.headers["X-Tab"] == "a b"


def test_the_query_is_dropped_and_close_is_read() -> None:
    head = parse_head(b"GET /v1/models?x=1 HTTP/1.1\r\nConnection: keep-alive, close")
    assert head is not None
    assert (head.path, head.length, head.close) == ("/v1/models", 0, True)
