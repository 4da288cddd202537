"""``rollhub gateway``: serve the gateway standalone, or check a model's token fidelity.

::

    rollhub gateway serve --config gateway.toml
    rollhub gateway serve --model smollm2-135m-instruct --engine transformers --port 8790
    rollhub gateway conformance [--family NAME | --all-templates] [--markdown]

``serve`` prints the root URL and the admin token (when it was generated) on one line each,
then serves until interrupted. Flags override the config file's values.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import signal
import sys
from typing import TYPE_CHECKING, Any

from rollhub.errors import ConfigError

from rollhub_gateway.config import GatewayConfig, load_gateway_config, parse_gateway_config

if TYPE_CHECKING:
    from rollhub_gateway.gateway import Gateway

__all__ = ["add_arguments", "run"]

log = logging.getLogger(__name__)

#: port of the standalone server when neither the flag nor the config file names one
DEFAULT_PORT = 8790


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``gateway`` subcommands to ``parser``."""
    sub = parser.add_subparsers(dest="gateway_command", metavar="SUBCOMMAND")
    serve = sub.add_parser("serve", help="serve the gateway until interrupted")
    serve.add_argument("--config", help="gateway TOML file (top-level keys or a [gateway] table)")
    serve.add_argument("--model", help="model config word or local model directory")
    serve.add_argument(
        "--engine", help="sampling backend name (transformers, vllm, sglang, tinker)"
    )
    serve.add_argument(
        "--engine-option", action="append", default=[], metavar="KEY=VALUE",
        help="a sampling backend option (repeatable; VALUE is read as JSON when it parses)",
    )  # fmt: skip
    serve.add_argument("--host", help="interface to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help=f"port to bind (default {DEFAULT_PORT})")
    serve.add_argument("--admin-token", help="bearer token of the admin routes (default: random)")
    serve.add_argument("--chat-template", help="chat template override: a .jinja file")
    serve.add_argument("--family", help="template family override (e.g. hermes)")
    serve.add_argument("--journal", help="SQLite journal path (sessions survive restarts)")
    conf = sub.add_parser("conformance", help="check token fidelity of the template families")
    conf.add_argument("--family", action="append", help="run only this family (repeatable)")
    conf.add_argument("--markdown", action="store_true", help="print a Markdown table")
    conf.add_argument(
        "--via",
        choices=["both", "http", "direct"],
        default="both",
        help="drive sessions through the HTTP API, the Conversation API, or both",
    )
    conf.add_argument(
        "--all-templates",
        action="store_true",
        help="also run TRL's training copies of each template and check that templates "
        "without a tool-call syntax refuse tools",
    )
    parser.set_defaults(_gateway_parser=parser)


def build_config(args: argparse.Namespace) -> GatewayConfig:
    """The gateway config of ``serve``'s flags over its ``--config`` file."""
    overrides: dict[str, Any] = {
        "model": args.model,
        "host": args.host,
        "port": args.port,
        "admin_token": args.admin_token,
        "chat_template": args.chat_template,
        "family": args.family,
        "journal_path": args.journal,
    }
    overrides = {k: v for k, v in overrides.items() if v is not None}
    if args.config:
        base = load_gateway_config(args.config).model_dump(exclude_unset=True)
        data = {"port": DEFAULT_PORT, **base, **overrides}
    else:
        data = {"port": DEFAULT_PORT, **overrides}
    engine = dict(data.get("engine") or {})
    if args.engine:
        if engine.get("name") not in (None, args.engine):
            engine["options"] = {}  # options of another backend do not carry over
        engine["name"] = args.engine
    options = dict(engine.get("options") or {})
    for item in args.engine_option:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--engine-option {item!r} must be KEY=VALUE", field="engine.options")
        try:
            options[key] = json.loads(raw)
        except ValueError:
            options[key] = raw
    if options:
        engine["options"] = options
    if engine:
        data["engine"] = engine
    return parse_gateway_config(data, source=args.config or "command line")


def run(args: argparse.Namespace) -> int:
    """Run a ``gateway`` subcommand; returns the exit code."""
    command = getattr(args, "gateway_command", None)
    if command == "serve":
        return _serve(build_config(args))
    if command == "conformance":
        from rollhub_gateway import conformance

        argv = [f"--family={f}" for f in args.family or []] + [f"--via={args.via}"]
        argv += ["--markdown"] if args.markdown else []
        argv += ["--all-templates"] if args.all_templates else []
        return int(conformance.main(argv) or 0)
    args._gateway_parser.print_help()
    return 2


def _serve(config: GatewayConfig) -> int:
    from rollhub_gateway.http.serving import serve_forever

    generated = config.admin_token is None

    def ready(gateway: Gateway, url: str) -> None:
        print(
            f"rollhub gateway serving {gateway.chat_model.model_id} at {url} (OpenAI base_url {url}/v1)",
            flush=True,
        )
        if generated:
            print(f"admin token: {gateway.admin_token}", flush=True)

    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError):  # no signal handlers on Windows loops
            loop.add_signal_handler(signal.SIGTERM, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await serve_forever(config, on_ready=ready)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
    print("rollhub gateway stopped", file=sys.stderr)
    return 0
