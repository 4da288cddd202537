"""What the gateway's hand-written HTTP head parser and metrics cost per turn, against the
libraries that could replace them: ``httptools`` (llhttp, uvicorn's parser) for framing a
request, and ``prometheus-client`` (plain and multiprocess mode) for counting a turn.

Reproduce::

    .venv/bin/python bench/bench_gateway_libraries.py

The request is the turn-64 request of the reference benchmark's tool session (its head:
the headers aiohttp's client sends). Each figure is the best of 5 rounds of 20,000 calls,
in microseconds per call.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

HEAD = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8123\r\n"
    b"Authorization: Bearer rk-0123456789abcdefghijklmnopqrstuvwxyzABCDEFGH\r\n"
    b"Content-Type: application/json\r\nAccept: */*\r\nAccept-Encoding: gzip, deflate\r\n"
    b"User-Agent: Python/3.11 aiohttp/3.13.2\r\nContent-Length: 20480"
)
N = 20_000


def best_us(fn: Callable[[], Any], n: int = N, rounds: int = 5) -> float:
    """Best-of-``rounds`` time of one call, in microseconds."""
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e6


def head_parsers() -> dict[str, float]:
    """The fast path's regex head parser against httptools building the same head."""
    import httptools
    from multidict import CIMultiDict
    from rollhub_gateway.http.request_head import parse_head

    class Head:
        def __init__(self) -> None:
            self.url = b""
            self.headers: CIMultiDict[str] = CIMultiDict()
            self.done = False

        def on_url(self, url: bytes) -> None:
            self.url += url

        def on_header(self, name: bytes, value: bytes) -> None:
            self.headers.add(name.decode("latin-1"), value.decode("latin-1"))

        def on_headers_complete(self) -> None:
            self.done = True

    raw = HEAD + b"\r\n\r\n"

    def with_httptools() -> Any:
        h = Head()
        p = httptools.HttpRequestParser(h)
        p.feed_data(raw)
        length = int(h.headers.get("Content-Length", "0"))
        return p.get_method().decode(), h.url.decode(), h.headers, length, p.should_keep_alive()

    assert parse_head(HEAD) is not None
    assert with_httptools()[3] == 20480
    return {
        "request_head.parse_head (its checks included)": best_us(lambda: parse_head(HEAD)),
        "bare httptools parse + the same RequestHead fields": best_us(with_httptools),
    }


def metrics() -> dict[str, float]:
    """One turn's counting (one request, one turn) by GatewayMetrics and prometheus-client."""
    from rollhub_gateway.metrics import GatewayMetrics, TurnLog

    entry = TurnLog("s", 64, "/v1/chat/completions", 4324, 32, 0.7, 0.05, "tool_calls",
                    "append", False, None)  # fmt: skip
    ours = GatewayMetrics()

    def ours_turn() -> None:
        ours.request("/v1/chat/completions", 200)
        ours.turn(entry, log_line=False)

    out = {"GatewayMetrics (request + turn)": best_us(ours_turn)}
    out["prometheus-client, plain (request + turn)"] = _prometheus_turn_us(entry)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp()
    out["prometheus-client, multiprocess (request + turn)"] = _prometheus_turn_us(entry)
    return out


def _prometheus_turn_us(entry: Any) -> float:
    """One turn counted by prometheus-client in the mode ``PROMETHEUS_MULTIPROC_DIR`` sets."""
    import prometheus_client as pc
    from prometheus_client import values

    values.ValueClass = values.get_value_class()  # the mode is read when a metric is made
    reg = pc.CollectorRegistry()
    requests = pc.Counter("req", "", ["route", "status"], registry=reg)
    turns = pc.Counter("turns", "", ["finish_reason", "drift"], registry=reg)
    tokens = pc.Counter("tokens", "", ["kind"], registry=reg)
    engine = pc.Histogram("engine_s", "", registry=reg)
    latency = pc.Histogram("turn_s", "", ["route"], registry=reg)

    def turn() -> None:
        requests.labels("/v1/chat/completions", "200").inc()
        turns.labels(entry.finish_reason, entry.drift).inc()
        tokens.labels("prompt").inc(entry.prompt_tokens)
        tokens.labels("output").inc(entry.output_tokens)
        engine.observe(entry.engine_ms / 1000)
        latency.labels(entry.route).observe(entry.latency_ms / 1000)

    return best_us(turn)


if __name__ == "__main__":
    for name, us in {**head_parsers(), **metrics()}.items():
        print(f"{name:55s} {us:7.2f} µs")
