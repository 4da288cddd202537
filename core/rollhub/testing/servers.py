"""Serve an ASGI app over real HTTP on loopback, for the length of a ``with`` block.

::

    with serve_app(app) as base_url:
        httpx.get(f"{base_url}/ping")

The server runs uvicorn in a background thread with its own event loop (lifespan events
included) on a socket this helper binds first, so there is no race for the port.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

from starlette.types import ASGIApp

__all__ = ["serve_app"]

log = logging.getLogger(__name__)


@contextlib.contextmanager
def serve_app(
    app: ASGIApp,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    startup_timeout_s: float = 10.0,
    shutdown_timeout_s: float = 15.0,
    **uvicorn_options: Any,
) -> Iterator[str]:
    """Run ``app`` with uvicorn; yield ``http://host:port``; stop it on exit.

    :param port: 0 picks a free port.
    :param uvicorn_options: extra ``uvicorn.Config`` options (``log_level`` is ``warning``).
    :raises RuntimeError: the server did not start within ``startup_timeout_s``.
    """
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound_port = sock.getsockname()[1]
    options: dict[str, Any] = {"log_level": "warning", "lifespan": "on", **uvicorn_options}
    server = uvicorn.Server(uvicorn.Config(app, **options))
    errors: list[BaseException] = []

    def run() -> None:
        try:
            server.run(sockets=[sock])
        except BaseException as exc:  # reported to the caller below
            errors.append(exc)

    thread = threading.Thread(target=run, name=f"uvicorn-{bound_port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout_s
    while not server.started:
        if errors or not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            thread.join(shutdown_timeout_s)
            sock.close()
            raise RuntimeError(f"uvicorn did not start on {host}:{bound_port}: {errors}")
        time.sleep(0.01)
    try:
        yield f"http://{host}:{bound_port}"
    finally:
        server.should_exit = True
        thread.join(shutdown_timeout_s)
        if thread.is_alive():
            log.warning("uvicorn on port %d did not stop in %.0fs", bound_port, shutdown_timeout_s)
        sock.close()
