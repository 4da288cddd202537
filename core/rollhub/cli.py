"""The ``rollhub`` command line.

Exit codes: 0 ok, 1 runtime failure, 2 usage or config error, 130 interrupted (Ctrl-C),
143 terminated (SIGTERM, stopped as Ctrl-C stops it). Errors print one line; ``--debug``
adds the traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from types import ModuleType

from rollhub.commands import COMMANDS, CommandTable
from rollhub.commands.sigterm import sigterm_as_interrupt, sigterm_received
from rollhub.errors import ConfigError, PluginError, RollhubError, UsageError

log = logging.getLogger(__name__)

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
#: as a shell reports a process ended by SIGINT (128 + 2) or SIGTERM (128 + 15)
EXIT_INTERRUPTED, EXIT_TERMINATED = 130, 143

def _commands() -> dict[str, tuple[str, str]]:
    """The core's commands plus every plugin's (a plugin that fails is left out, logged)."""
    from rollhub.plugins import build_host

    table = CommandTable(COMMANDS)
    try:
        host = build_host()
        host.hook.rollhub_add_commands(commands=table)
    except Exception as exc:  # the core's own commands must stay usable
        log.warning("plugin subcommands unavailable: %s", exc)
    return table.commands


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand whose module can be imported."""
    parser = argparse.ArgumentParser(
        prog="rollhub",
        description="Turn LLM agents into RL rollout workers for any training backend.",
    )
    parser.add_argument("--debug", action="store_true", help="print tracebacks on errors")
    parser.add_argument(
        "--log-level",
        default=None,
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="level of rollhub's logs; wins over [logging] level of the config (both default "
        "to WARNING)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (modname, help_text) in _commands().items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        module = _import_command(modname)
        if module is None:
            dist = modname.split(".")[0].replace("_", "-")
            p.set_defaults(_missing=f"'rollhub {name}' needs {dist}: pip install {dist}")
            continue
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def _import_command(modname: str) -> ModuleType | None:
    import importlib

    try:
        return importlib.import_module(modname)
    except ModuleNotFoundError as exc:
        if exc.name and modname.startswith(exc.name):
            return None
        raise


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``rollhub`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level or "WARNING",
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    missing = getattr(args, "_missing", None)
    if missing:
        print(f"rollhub: error: {missing}", file=sys.stderr)
        return EXIT_USAGE
    run: Callable[[argparse.Namespace], int] = args._run
    with sigterm_as_interrupt():
        try:
            return run(args)
        except ConfigError as exc:  # a component's options too: say when a variable set it
            from rollhub.config import env_note

            note = env_note(exc.context.get("field"), os.environ)
            _report(exc if note in str(exc) else ConfigError(f"{exc}{note}"), args.debug)
            return EXIT_USAGE
        except (UsageError, PluginError) as exc:
            _report(exc, args.debug)
            return EXIT_USAGE
        except RollhubError as exc:
            _report(exc, args.debug)
            return EXIT_FAILURE
        except KeyboardInterrupt:
            if sigterm_received():
                print("rollhub: terminated (SIGTERM)", file=sys.stderr)
                return EXIT_TERMINATED
            print("rollhub: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        except BrokenPipeError:  # output piped into `head` and the like: not an error
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return EXIT_OK
        except Exception as exc:  # an unexpected failure: one line, the traceback with --debug
            _report(exc, args.debug, unexpected=True)
            return EXIT_FAILURE


def _report(exc: BaseException, debug: bool, *, unexpected: bool = False) -> None:
    if debug:
        import traceback

        traceback.print_exception(exc)
    what = f"{type(exc).__name__}: {exc}" if unexpected else str(exc)
    hint = "" if debug or not unexpected else " (run with --debug for the traceback)"
    print(f"rollhub: error: {what}{hint}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
