"""The page's HTTP server: a Starlette app over one or more run directories.

Routes (all GET):

- ``/`` and ``/static/…``: the page (plain HTML, JS, CSS of this package) and plotly.js
  (served from the installed ``plotly`` package);
- ``/api/runs``: every run's status, config, counts; ``/api/poll``: what changed (the page
  polls it every two seconds for live updates);
- ``/api/runs/{run}/metrics?since=N``: per-step rows from step N on;
- ``/api/runs/{run}/stats``: failures by cause, reward histogram, per-group rewards, latency;
- ``/api/runs/{run}/episodes?…``: one page of the filtered, sorted episode table;
  ``/api/runs/{run}/facets``: the filters' values;
- ``/api/runs/{run}/episodes/{n}``: one episode, decoded;
  ``/api/runs/{run}/group?step=&group=``: the episodes of one group;
- ``/api/runs/{run}/files/{path}``: a file inside the run directory (its plots), nothing
  outside it.

Every response says ``Content-Security-Policy: script-src 'self'`` and the page renders
model text with ``textContent`` only, so a completion holding ``<script>`` stays text.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from rollhub.errors import UsageError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Route

from rollhub_view.errors import NotFound
from rollhub_view.index import EpisodeIndex, Query
from rollhub_view.run_dir import RunDir
from rollhub_view.stats import run_stats
from rollhub_view.tokens import decoder_for, episode_view

__all__ = ["LOOPBACK_HOSTS", "RunState", "ViewState", "make_app", "plotly_js"]

log = logging.getLogger(__name__)

#: Host headers accepted when the server listens on loopback (no DNS rebinding)
LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "::1", "[::1]"]
#: the page's own files, by name
STATIC = {"index.html": "text/html", "app.js": "text/javascript", "style.css": "text/css"}
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data: blob:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def plotly_js() -> Path | None:
    """``plotly.min.js`` of the installed ``plotly`` package (None when it is missing)."""
    try:
        path = Path(str(resources.files("plotly") / "package_data" / "plotly.min.js"))
    except ModuleNotFoundError:
        return None
    return path if path.is_file() else None


class RunState:
    """One run directory with its episode index and cached numbers."""

    def __init__(self, run: RunDir) -> None:
        self.run = run
        self._index: EpisodeIndex | None = None
        self._stats: tuple[tuple[int, int], dict[str, Any]] | None = None
        self._lock = threading.Lock()

    @property
    def index(self) -> EpisodeIndex:
        """The episode index of the run's episodes file (re-made if the file appears or
        changes from Parquet to JSONL)."""
        path = self.run.episodes_file() or self.run.files.episodes
        with self._lock:
            if self._index is None or self._index.path != path:
                self._index = EpisodeIndex(path)
            return self._index

    def refresh(self) -> None:
        """Read what the run wrote since the last call."""
        self.run.refresh_metrics()
        self.index.refresh()

    def stats(self) -> dict[str, Any]:
        """:func:`run_stats`, recomputed only when episodes were added."""
        index = self.index
        key = (index.generation, len(index))
        if self._stats is None or self._stats[0] != key:
            self._stats = (key, run_stats(index))
        return self._stats[1]

    def info(self, run_id: int) -> dict[str, Any]:
        """What the page's header and overview show of the run."""
        run = self.run
        cfg = run.config()
        return {
            "id": run_id,
            "name": run.name,
            "path": str(run.path),
            "kind": run.kind(),
            "status": run.status(),
            "steps_done": len(run.metrics),
            "steps_total": run.steps_total(),
            "episodes": len(self.index),
            "generation": self.index.generation,
            "model": run.model(),
            "config": cfg,
            "eval": run.read_json(run.files.EVAL),
            "manifest": run.read_json(run.files.MANIFEST),
            "summary": run.read_json(run.files.SUMMARY),
            "images": run.images(),
            "last_write": run.last_write(),
        }


class ViewState:
    """Every run the server shows, by position on the command line."""

    def __init__(self, runs: list[RunDir]) -> None:
        if not runs:
            raise UsageError("rollhub view needs at least one RUN_DIR")
        self.runs = [RunState(r) for r in runs]
        for r in runs:
            if r.model():
                decoder_for(r.model())  # start loading the tokenizer now

    def get(self, run_id: int) -> RunState:
        """The run at position ``run_id``; :class:`UsageError` when there is none."""
        if not 0 <= run_id < len(self.runs):
            raise NotFound(f"no run {run_id} (there are {len(self.runs)})")
        state = self.runs[run_id]
        state.refresh()
        return state

    def refresh(self) -> None:
        """Read every run's new lines."""
        for state in self.runs:
            state.refresh()


def _json(data: object, status: int = 200) -> JSONResponse:
    return JSONResponse(data, status_code=status, headers={"Cache-Control": "no-store"})


def _int(request: Request, name: str, default: int | None = None) -> int | None:
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return default
    try:
        return int(raw)
    except ValueError:
        raise UsageError(f"{name}: {raw!r} is not an integer") from None


def _float(request: Request, name: str) -> float | None:
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return None
    try:
        return float(raw)
    except ValueError:
        raise UsageError(f"{name}: {raw!r} is not a number") from None


def _query(request: Request) -> Query:
    p = request.query_params
    return Query(
        step=_int(request, "step"),
        group=p.get("group") or None,
        status=p.get("status") or None,
        reward_min=_float(request, "reward_min"),
        reward_max=_float(request, "reward_max"),
        version=_int(request, "version"),
        turns=_int(request, "turns"),
        cause=p.get("cause") or None,
        split=p.get("split") or None,
        node=p.get("node") or None,
        text=p.get("q") or None,
        sort=p.get("sort") or "n",
        descending=p.get("desc") in ("1", "true"),
        page=_int(request, "page", 0) or 0,
        size=_int(request, "size", 50) or 50,
    )


def make_app(state: ViewState, *, allowed_hosts: list[str] | None = None) -> Starlette:
    """The app serving ``state``'s runs.

    :param allowed_hosts: Host headers accepted (None: any; the command passes
        :data:`LOOPBACK_HOSTS` when it listens on loopback).
    """
    static_dir = resources.files("rollhub_view") / "static"

    def page(request: Request) -> Response:
        return static(request, "index.html")

    def static(request: Request, name: str | None = None) -> Response:
        name = name or request.path_params["name"]
        if name == "plotly.min.js":
            path = plotly_js()
            if path is None:
                return Response("// plotly is not installed\n", media_type="text/javascript",
                                headers=SECURITY_HEADERS)
            return FileResponse(path, media_type="text/javascript",
                                headers={**SECURITY_HEADERS, "Cache-Control": "max-age=86400"})
        if name not in STATIC:
            return Response("not found", status_code=404, headers=SECURITY_HEADERS)
        body = (static_dir / name).read_bytes()
        return Response(body, media_type=STATIC[name],
                        headers={**SECURITY_HEADERS, "Cache-Control": "no-cache"})

    def runs(request: Request) -> Response:
        state.refresh()
        return _json({"runs": [s.info(i) for i, s in enumerate(state.runs)]})

    def poll(request: Request) -> Response:
        state.refresh()
        return _json({"runs": [
            {"id": i, "steps_done": len(s.run.metrics), "episodes": len(s.index),
             "generation": s.index.generation, "status": s.run.status()}
            for i, s in enumerate(state.runs)
        ]})

    def metrics(request: Request) -> Response:
        s = state.get(request.path_params["run"])
        since = _int(request, "since", 0) or 0
        rows = s.run.metrics
        return _json({"total": len(rows), "since": since, "rows": rows[since:]})

    def stats(request: Request) -> Response:
        return _json(state.get(request.path_params["run"]).stats())

    def episodes(request: Request) -> Response:
        s = state.get(request.path_params["run"])
        return _json(s.index.query(_query(request)))

    def facets(request: Request) -> Response:
        return _json(state.get(request.path_params["run"]).index.facets())

    def episode(request: Request) -> Response:
        s = state.get(request.path_params["run"])
        n = request.path_params["n"]
        row = s.index.row(n)
        return _json(episode_view(row, decoder_for(s.run.model()), n))

    def group(request: Request) -> Response:
        s = state.get(request.path_params["run"])
        gid = request.query_params.get("group") or ""
        found = s.index.group(_int(request, "step"), gid)
        if not found:
            raise NotFound(f"no group {gid!r} at that step")
        return _json({"group_id": gid, "step": _int(request, "step"),
                      "episodes": [s.index.rows[n].to_json() for n in found]})

    def file(request: Request) -> Response:
        s = state.get(request.path_params["run"])
        path = s.run.file(request.path_params["path"])
        return FileResponse(path, headers=SECURITY_HEADERS)

    def guarded(handler: Callable[[Request], Response]) -> Callable[[Request], Response]:
        def endpoint(request: Request) -> Response:
            try:
                return handler(request)
            except UsageError as exc:
                log.info("%s %s refused: %s", request.method, request.url.path, exc)
                status = 404 if isinstance(exc, NotFound) else 400
                return _json({"error": str(exc)}, status)

        return endpoint

    routes = [
        Route("/", guarded(page)),
        Route("/static/{name}", guarded(static)),
        Route("/favicon.ico", lambda request: Response(status_code=204)),
        Route("/api/runs", guarded(runs)),
        Route("/api/poll", guarded(poll)),
        Route("/api/runs/{run:int}/metrics", guarded(metrics)),
        Route("/api/runs/{run:int}/stats", guarded(stats)),
        Route("/api/runs/{run:int}/episodes", guarded(episodes)),
        Route("/api/runs/{run:int}/facets", guarded(facets)),
        Route("/api/runs/{run:int}/episodes/{n:int}", guarded(episode)),
        Route("/api/runs/{run:int}/group", guarded(group)),
        Route("/api/runs/{run:int}/files/{path:path}", guarded(file)),
    ]
    middleware = []
    if allowed_hosts is not None:
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts))
    return Starlette(routes=routes, middleware=middleware)
