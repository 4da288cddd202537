"""``rollhub plugins``: every plugin and component, with distribution, version and failures.

A plugin's status says what it contributes: ``ok`` (components), ``hooks only``, ``no
components`` (it loaded but adds nothing: a skeleton, or a missing extra), ``FAILED``.
Firstresult hooks that several plugins implement are listed with the one that answers.
"""

from __future__ import annotations

import argparse
import json

from rollhub.plugins import build_host


def _core_version() -> str:
    from rollhub import __version__

    return __version__


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare this subcommand's arguments."""
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args: argparse.Namespace) -> int:
    """Run the subcommand; return the exit code (errors are raised as rollhub errors)."""
    host = build_host()
    rows = []
    for rec in host.plugins.values():
        hooks = host.hooks_of(rec.name) if rec.error is None else []
        rows.append(
            {
                "plugin": rec.name,
                "source": rec.source,
                "distribution": rec.distribution or ("rollhub" if rec.source == "builtin" else "-"),
                "version": rec.version or (_core_version() if rec.source == "builtin" else "-"),
                "status": _status(rec.error, rec.components, hooks),
                "components": rec.components,
                "hooks": hooks,
                "error": str(rec.error) if rec.error else None,
            }
        )
    competing = host.competing()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 1 if host.failures() else 0
    print("Plugins:")
    for r in rows:
        print(f"  {r['plugin']:<34} {r['distribution']:<22} {r['version']:<10} {r['status']}")
    print("\nComponents:")
    for c in host.registry.all():
        print(f"  {c.kind:<17} {c.name:<14} {c.plugin} ({c.distribution or 'rollhub'})")
    if competing:
        print("\nFirstresult hooks with several plugins (the first answers):")
        for hook, plugins in competing:
            print(f"  {hook:<30} {plugins[0]} (then {', '.join(plugins[1:])})")
    failures = host.failures()
    if failures:
        print("\nLoad failures:")
        for err in failures:
            print(f"  {err}")
    return 1 if failures else 0


def _status(error: object, components: list[str], hooks: list[str]) -> str:
    if error is not None:
        return "FAILED"
    if components:
        return "ok"
    if hooks:
        return "hooks only"
    return "no components"
