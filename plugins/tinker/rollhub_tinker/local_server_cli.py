"""``rollhub tinker-local``: set up and serve the local Tinker-compatible server on CPU.

::

    rollhub tinker-local setup [--env-dir DIR] [--python PY] [--force]
    rollhub tinker-local serve [--port P] [--env-dir DIR] [--state-dir DIR]
                               [--session-timeout-sec N] [--max-lora-adapters N]
                               [--max-lora-rank N] [--backend-option KEY=VALUE ...]

``setup`` builds the server's own environment and converts the base model (minutes, once;
later runs reuse both while the pins are unchanged). ``serve`` sets up if needed, prints the
base URL and the ``base_model`` string for rollhub.toml, and serves until interrupted.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time
from types import FrameType

from rollhub.errors import ConfigError, UsageError

from rollhub_tinker.local_server import (
    DEFAULT_PORT,
    ENV_DIR_VAR,
    LocalServerError,
    LocalTinkerServer,
    default_env_dir,
)

__all__ = ["add_arguments", "run"]

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``setup`` and ``serve`` subcommands to ``parser``."""
    sub = parser.add_subparsers(dest="tinker_local_command", metavar="SUBCOMMAND")
    env_help = (
        f"environment, model and state directory (default ${ENV_DIR_VAR} or {default_env_dir()})"
    )
    setup = sub.add_parser("setup", help="build the server environment and convert the model")
    setup.add_argument("--env-dir", help=env_help)
    setup.add_argument("--python", help="Python 3.11 interpreter to build with (default: found)")
    setup.add_argument("--force", action="store_true", help="rebuild even when up to date")
    serve = sub.add_parser("serve", help="serve on 127.0.0.1 until interrupted")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}")
    serve.add_argument("--env-dir", help=env_help)
    serve.add_argument("--state-dir", help="checkpoints and database (default ENV_DIR/state)")
    serve.add_argument(
        "--session-timeout-sec", type=int, default=300,
        help="unload a client's adapters after this many seconds without heartbeat (default 300)",
    )  # fmt: skip
    serve.add_argument(
        "--max-lora-adapters", type=int, default=4,
        help="adapter slots, slot 0 being the base model (default 4)",
    )  # fmt: skip
    serve.add_argument("--max-lora-rank", type=int, default=8, help="largest LoRA rank (default 8)")
    serve.add_argument(
        "--backend-option", action="append", default=[], metavar="KEY=VALUE",
        help="a skyrl JAX backend option, e.g. sample_max_num_sequences=8 (repeatable; "
        "VALUE is read as JSON when it parses)",
    )  # fmt: skip
    serve.add_argument(
        "--ready-timeout", type=float, default=300.0,
        help="seconds to wait for the engine to load the model (default 300)",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Run ``rollhub tinker-local setup`` or ``serve``."""
    command = getattr(args, "tinker_local_command", None)
    if command == "setup":
        return _setup(args)
    if command == "serve":
        return _serve(args)
    raise UsageError("rollhub tinker-local needs a subcommand: setup or serve")


def _setup(args: argparse.Namespace) -> int:
    server = LocalTinkerServer(args.env_dir, python=args.python)
    if not server.is_set_up() or args.force:
        print(
            f"building the local Tinker server environment in {server.env_dir} "
            f"(a few minutes; log: {server.env_dir / 'setup.log'})",
            flush=True,
        )
    info = server.setup(force=args.force)
    state = "up to date" if info.reused else f"built in {info.seconds:.0f} s"
    print(f"environment: {info.env_dir / 'venv'} ({state})")
    print(f"base_model: {info.model_dir}")
    return 0


def _backend_options(items: list[str]) -> dict[str, object]:
    options: dict[str, object] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(
                f"--backend-option wants KEY=VALUE, got {item!r}", field="backend-option"
            )
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return options


def _serve(args: argparse.Namespace) -> int:
    server = LocalTinkerServer(
        args.env_dir,
        state_dir=args.state_dir,
        session_timeout_sec=args.session_timeout_sec,
        max_lora_adapters=args.max_lora_adapters,
        max_lora_rank=args.max_lora_rank,
        ready_timeout_s=args.ready_timeout,
        backend_options=_backend_options(args.backend_option),
    )
    if not server.is_set_up():
        print(f"setting up {server.env_dir} first (a few minutes, once)", flush=True)
    print(f"starting the local Tinker server (log: {server.log_path})", flush=True)

    def terminate(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    # SIGTERM (e.g. from a process manager) stops the server like Ctrl-C does; SIGINT gets
    # the same handler explicitly, since a SIGINT ignored by the parent is inherited and
    # Python then installs no KeyboardInterrupt handler of its own.
    previous = {s: signal.signal(s, terminate) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        base_url = server.start(args.port)
        print(f"ready in {server.ready_seconds:.0f} s: {base_url}")
        print("in rollhub.toml ([trainer], or the gateway's tinker engine options):")
        print(f'  base_url = "{base_url}"')
        print(f'  base_model = "{server.base_model}"')
        print('  api_key = "tml-local"   # any value: the local server does not check it')
        print("serving until Ctrl-C", flush=True)
        while server.running:
            time.sleep(1.0)
        raise LocalServerError(
            f"the local Tinker server exited; see {server.log_path}", log=str(server.log_path)
        )
    except KeyboardInterrupt:
        print("stopping", file=sys.stderr, flush=True)
        return 0
    finally:
        server.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
