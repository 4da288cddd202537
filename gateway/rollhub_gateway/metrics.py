"""Observability of the gateway: a structured log line per turn and Prometheus metrics.

``GET /metrics`` serves counters and latency histograms in the Prometheus text exposition
format (version 0.0.4): requests by route and status, turns by finish reason and drift,
prompt and output tokens, engine and turn latency, active sessions, and the token path's
drift counters summed over live sessions.

Why not ``prometheus-client``: counting one turn (a request, a turn, its tokens and two
latencies) costs 6-9 µs here and 13-21 µs with prometheus-client's metrics, 20-32 µs in its
multiprocess mode that a replica pool would need (three rounds of
``bench/bench_gateway_libraries.py`` on the 2-core machine). A turn costs ~0.7 ms of
gateway CPU at 0.08-0.10× of the reference gateway's, so the library's 1-3% would spend
the margin; the few series are kept in plain dicts, one replica serves its own.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

__all__ = ["LATENCY_BUCKETS", "GatewayMetrics", "Histogram", "TurnLog"]

log = logging.getLogger(__name__)
turn_log = logging.getLogger("rollhub_gateway.turns")

#: seconds; covers a scripted engine (sub-ms) up to a long CPU generation
LATENCY_BUCKETS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip


class Histogram:
    """A cumulative-bucket histogram (one label set)."""

    def __init__(self, buckets: Iterable[float] = LATENCY_BUCKETS) -> None:
        self.buckets = tuple(sorted(buckets))
        self.counts = [0] * len(self.buckets)
        self.total = 0.0
        self.n = 0

    def observe(self, value: float) -> None:
        """Add one observation."""
        self.n += 1
        self.total += value
        for i, edge in enumerate(self.buckets):
            if value <= edge:
                self.counts[i] += 1

    def lines(self, name: str, labels: str) -> list[str]:
        """Exposition lines of this histogram."""
        sep = "," if labels else ""
        out = [
            f'{name}_bucket{{{labels}{sep}le="{_fmt(e)}"}} {c}'
            for e, c in zip(self.buckets, self.counts, strict=False)
        ]
        out.append(f'{name}_bucket{{{labels}{sep}le="+Inf"}} {self.n}')
        suffix = f"{{{labels}}}" if labels else ""
        out.append(f"{name}_sum{suffix} {_fmt(self.total)}")
        out.append(f"{name}_count{suffix} {self.n}")
        return out


@dataclass(frozen=True)
class TurnLog:
    """The fields of one turn's structured log line."""

    session_id: str
    turn: int
    route: str
    prompt_tokens: int
    output_tokens: int
    latency_ms: float
    engine_ms: float
    finish_reason: str
    drift: str
    stream: bool
    weight_version: int | None


class GatewayMetrics:
    """Counters and histograms of one gateway; thread-safe (threaded serving reads them)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, int], int] = {}
        self.turns: dict[tuple[str, str], int] = {}
        self.tokens: dict[str, int] = {"prompt": 0, "output": 0}
        self.engine_latency = Histogram()
        self.turn_latency: dict[str, Histogram] = {}
        self.sessions_opened = 0
        self.sessions_closed: dict[str, int] = {}
        self.engine_errors = 0
        self.aborted_streams = 0
        #: set by the server: () -> number of open sessions
        self.active_sessions: Callable[[], int] = lambda: 0
        #: set by the server: () -> token path drift counts summed over every session
        self.drift_counts: Callable[[], dict[str, int]] = dict
        #: set by the server: () -> the token path's process-wide counters (all gateways)
        self.process_drift_counts: Callable[[], dict[str, int]] = dict
        #: set by the server: () -> damaged journal rows found, by kind
        self.journal_corruptions: Callable[[], dict[str, int]] = dict

    def request(self, route: str, status: int) -> None:
        """Count one HTTP request by route pattern and status."""
        with self._lock:
            key = (route, status)
            self.requests[key] = self.requests.get(key, 0) + 1

    def turn(self, entry: TurnLog, *, log_line: bool = True) -> None:
        """Record one committed turn and, if asked, log it as one JSON line."""
        with self._lock:
            key = (entry.finish_reason, entry.drift)
            self.turns[key] = self.turns.get(key, 0) + 1
            self.tokens["prompt"] += entry.prompt_tokens
            self.tokens["output"] += entry.output_tokens
            self.engine_latency.observe(entry.engine_ms / 1000.0)
            self.turn_latency.setdefault(entry.route, Histogram()).observe(
                entry.latency_ms / 1000.0
            )
        if log_line and turn_log.isEnabledFor(logging.INFO):
            turn_log.info("turn %s", json.dumps(entry.__dict__, separators=(",", ":")))

    def session_opened(self) -> None:
        """Count an opened session."""
        with self._lock:
            self.sessions_opened += 1

    def session_closed(self, how: str) -> None:
        """Count a closed session by how it ended (finished, dropped, expired)."""
        with self._lock:
            self.sessions_closed[how] = self.sessions_closed.get(how, 0) + 1

    def engine_error(self) -> None:
        """Count an engine failure."""
        with self._lock:
            self.engine_errors += 1

    def stream_aborted(self) -> None:
        """Count a stream the client left before it ended."""
        with self._lock:
            self.aborted_streams += 1

    def render(self) -> str:
        """The Prometheus text exposition of every series."""
        with self._lock:
            lines: list[str] = []
            _head(
                lines,
                "rollhub_gateway_requests_total",
                "counter",
                "HTTP requests by route and status",
            )
            for (route, status), n in sorted(self.requests.items()):
                lines.append(
                    f'rollhub_gateway_requests_total{{route="{_esc(route)}",status="{status}"}} {n}'
                )
            _head(lines, "rollhub_gateway_turns_total", "counter", "committed model calls")
            for (finish, drift), n in sorted(self.turns.items()):
                lines.append(
                    f'rollhub_gateway_turns_total{{finish_reason="{finish}",drift="{drift}"}} {n}'
                )
            _head(lines, "rollhub_gateway_tokens_total", "counter", "prompt and sampled tokens")
            for kind, n in sorted(self.tokens.items()):
                lines.append(f'rollhub_gateway_tokens_total{{kind="{kind}"}} {n}')
            _head(
                lines, "rollhub_gateway_engine_latency_seconds", "histogram", "engine time per call"
            )
            lines += self.engine_latency.lines("rollhub_gateway_engine_latency_seconds", "")
            _head(
                lines, "rollhub_gateway_turn_latency_seconds", "histogram", "gateway time per call"
            )
            for route, h in sorted(self.turn_latency.items()):
                lines += h.lines("rollhub_gateway_turn_latency_seconds", f'route="{_esc(route)}"')
            _head(lines, "rollhub_gateway_sessions_opened_total", "counter", "sessions opened")
            lines.append(f"rollhub_gateway_sessions_opened_total {self.sessions_opened}")
            _head(
                lines, "rollhub_gateway_sessions_closed_total", "counter", "sessions closed by how"
            )
            for how, n in sorted(self.sessions_closed.items()):
                lines.append(f'rollhub_gateway_sessions_closed_total{{how="{how}"}} {n}')
            _head(lines, "rollhub_gateway_engine_errors_total", "counter", "engine failures (502)")
            lines.append(f"rollhub_gateway_engine_errors_total {self.engine_errors}")
            _head(
                lines, "rollhub_gateway_aborted_streams_total", "counter", "streams the client left"
            )
            lines.append(f"rollhub_gateway_aborted_streams_total {self.aborted_streams}")
        _head(lines, "rollhub_gateway_active_sessions", "gauge", "open sessions")
        lines.append(f"rollhub_gateway_active_sessions {self.active_sessions()}")
        _head(
            lines, "rollhub_gateway_drift_total", "counter", "token path drift counts, all sessions"
        )
        for kind, n in sorted(self.drift_counts().items()):
            lines.append(f'rollhub_gateway_drift_total{{kind="{_esc(kind)}"}} {n}')
        _head(
            lines,
            "rollhub_gateway_process_drift_total",
            "counter",
            "token path counters of this process",
        )
        for kind, n in sorted(self.process_drift_counts().items()):
            lines.append(f'rollhub_gateway_process_drift_total{{kind="{_esc(kind)}"}} {n}')
        _head(
            lines,
            "rollhub_gateway_journal_corruptions_total",
            "counter",
            "sessions refused because their journal rows were damaged, by kind",
        )
        for kind, n in sorted(self.journal_corruptions().items()):
            lines.append(f'rollhub_gateway_journal_corruptions_total{{kind="{_esc(kind)}"}} {n}')
        return "\n".join(lines) + "\n"


def _head(lines: list[str], name: str, kind: str, help_text: str) -> None:
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} {kind}")


def _fmt(value: float) -> str:
    if math.isinf(value):
        return "+Inf"
    return repr(float(value)) if not float(value).is_integer() else f"{value:.1f}"


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
