"""``rollhub plugins``: every plugin and component, with distribution, version and failures.

A plugin's status says what it contributes: ``ok`` (components), ``hooks only``, ``no
components`` (it loaded but adds nothing: a skeleton, or a missing extra), ``FAILED``.
Firstresult hooks that several plugins implement are listed with the one that answers.

``rollhub plugins KIND NAME`` (e.g. ``rollhub plugins trainer trl``) prints the options one
component takes in its config section: name, type, default and what it does.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from rollhub.errors import UsageError
from rollhub.plugins import PluginHost, build_host


def _core_version() -> str:
    from rollhub import __version__

    return __version__


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare this subcommand's arguments."""
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("kind", nargs="?", help="a component kind, e.g. trainer")
    parser.add_argument("name", nargs="?", help="the component's name, e.g. trl")


def run(args: argparse.Namespace) -> int:
    """Run the subcommand; return the exit code (errors are raised as rollhub errors)."""
    host = build_host()
    if args.kind:
        return _print_options(host, args.kind, args.name, as_json=args.json)
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


def component_options(cls: type) -> list[dict[str, Any]]:
    """The fields of a component's ``Options``: name, type, default, description."""
    options = getattr(cls, "Options", None)
    if options is None:
        return []
    out = []
    for name, field in options.model_fields.items():
        default = None if field.is_required() else field.get_default(call_default_factory=True)
        out.append({
            "name": name,
            "type": _type_name(field.annotation),
            "required": field.is_required(),
            "default": default,
            "description": field.description or "",
        })
    return out


def _type_name(annotation: object) -> str:
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    return text or str(annotation).replace("typing.", "")


def _print_options(host: PluginHost, kind: str, name: str | None, *, as_json: bool) -> int:
    if not name:
        raise UsageError(
            f"rollhub plugins {kind}: name the component too, e.g. rollhub plugins {kind} "
            f"{(host.registry.names(kind) or ['NAME'])[0]}"
        )
    info = host.registry.info(kind, name)
    fields = component_options(info.cls)
    if as_json:
        print(json.dumps({"kind": kind, "name": name, "plugin": info.plugin,
                          "distribution": info.distribution, "options": fields},
                         indent=2, default=str))
        return 0
    print(f"{kind} {name!r} from {info.plugin} ({info.distribution or 'rollhub'})")
    print(f"options (the [{kind}] section):" if fields else "no options")
    for f in fields:
        default = "required" if f["required"] else f"default {f['default']!r}"
        print(f"  {f['name']:<22} {f['type']:<28} {default}")
        if f["description"]:
            print(f"  {'':<22} {f['description']}")
    return 0


def _status(error: object, components: list[str], hooks: list[str]) -> str:
    if error is not None:
        return "FAILED"
    if components:
        return "ok"
    if hooks:
        return "hooks only"
    return "no components"
