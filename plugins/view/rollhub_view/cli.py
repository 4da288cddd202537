"""``rollhub view RUN_DIR [RUN_DIR ...] [--port N] [--host H]``: serve the page.

Listens on 127.0.0.1 unless ``--host`` says otherwise (the page has no login: another host
makes the runs readable from the network, and the command says so). Prints the URL, then
serves until Ctrl-C.
"""

from __future__ import annotations

import argparse
import logging
import socket
import sys
import time

from rollhub.app.guard import is_loopback
from rollhub.errors import UsageError

__all__ = ["DEFAULT_PORT", "add_arguments", "run"]

log = logging.getLogger(__name__)

DEFAULT_PORT = 8765


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command's arguments."""
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                        help="run directories; two or more are drawn on the same curves")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"port to listen on (default {DEFAULT_PORT}; 0: any free one)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1, this machine only)")


def run(args: argparse.Namespace) -> int:
    """Index the runs, print the URL, serve until interrupted."""
    import uvicorn

    from rollhub_view.run_dir import RunDir
    from rollhub_view.server import LOOPBACK_HOSTS, ViewState, make_app

    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port: {args.port} is not a port (0..65535)")
    runs = [RunDir(p) for p in args.run_dirs]
    names = [r.name for r in runs]
    for i, r in enumerate(runs):  # two runs of the same name: label them by position
        if names.count(r.name) > 1:
            r.name = f"{r.name} ({i + 1})"
    t0 = time.monotonic()
    state = ViewState(runs)
    state.refresh()
    episodes = sum(len(s.index) for s in state.runs)
    log.info("indexed %d episodes in %.2fs", episodes, time.monotonic() - t0)

    loopback = is_loopback(args.host)
    app = make_app(state, allowed_hosts=LOOPBACK_HOSTS if loopback else None)
    sock = _bind(args.host, args.port)
    port = sock.getsockname()[1]
    shown = f"[{args.host}]" if ":" in args.host else args.host
    print(f"rollhub view: http://{shown}:{port}/  ({len(runs)} run(s), {episodes} episodes; "
          f"Ctrl-C stops)", flush=True)
    if not loopback:
        print(f"rollhub view: listening on {args.host}: anyone who can reach this machine can "
              f"read these runs (there is no login)", file=sys.stderr, flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])
    return 0


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise UsageError(f"--port/--host: cannot listen on {host}:{port} ({exc.strerror}); "
                         f"pick another with --port N (0: any free one)") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock
