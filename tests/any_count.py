"""How much of the code's typing is erased: bare ``Any`` in signatures, and ``type: ignore``.

Counted per package (the core, the gateway, the sandbox and every plugin), outside the
tests: each parameter (``*args`` and ``**kwargs`` included) and each return annotated with
a bare ``Any`` (``typing.Any`` or the string ``"Any"``; ``dict[str, Any]`` does not
count), and each line that carries ``type: ignore``.

Run it from the repository root (``--json`` for a machine-readable table)::

    python tests/any_count.py
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: a ``type: ignore`` comment followed by its reason: ``# type: ignore[code]  # why``
IGNORE = re.compile(r"#\s*type:\s*ignore(\[[^\]]*\])?(?P<rest>.*)$")


@dataclass
class Count:
    """One package's erased types."""

    params: int = 0
    returns: int = 0
    ignores: int = 0

    @property
    def any_total(self) -> int:
        """Parameters and returns annotated ``Any``."""
        return self.params + self.returns


def packages(root: Path = ROOT) -> dict[str, Path]:
    """Package label -> its source folder."""
    found = {
        "core": root / "core" / "rollhub",
        "gateway": root / "gateway" / "rollhub_gateway",
        "sandbox": root / "sandbox" / "rollhub_sandbox",
    }
    for folder in sorted(root.glob("plugins/*/rollhub_*")):
        found[f"plugins/{folder.parent.name}"] = folder
    return found


def _is_any(node: ast.expr | None) -> bool:
    if isinstance(node, ast.Name):
        return node.id == "Any"
    if isinstance(node, ast.Attribute):
        return node.attr == "Any" and isinstance(node.value, ast.Name)
    return isinstance(node, ast.Constant) and node.value == "Any"


def count_source(source: str) -> Count:
    """The erased types of one module's source."""
    count = Count()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        args = node.args
        params = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
        count.params += sum(1 for p in params if p is not None and _is_any(p.annotation))
        count.returns += int(_is_any(node.returns))
    count.ignores = len(ignore_lines(source))
    return count


def ignore_lines(source: str) -> list[tuple[int, str]]:
    """``(line number, line)`` of every line with a ``type: ignore`` comment."""
    return [(i, line) for i, line in enumerate(source.splitlines(), 1) if IGNORE.search(line)]


def count_folder(folder: Path) -> Count:
    """The erased types of every module under ``folder``."""
    total = Count()
    for path in sorted(folder.rglob("*.py")):
        one = count_source(path.read_text(encoding="utf-8"))
        total.params += one.params
        total.returns += one.returns
        total.ignores += one.ignores
    return total


def count_all(root: Path = ROOT) -> dict[str, Count]:
    """Package label -> its count."""
    return {label: count_folder(folder) for label, folder in packages(root).items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("root", nargs="?", type=Path, default=ROOT, help="a checkout's root")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    counts = count_all(args.root)
    if args.json:
        print(json.dumps({k: asdict(v) for k, v in counts.items()}, indent=2))
        return 0
    print(f"{'package':<22} {'params':>7} {'returns':>8} {'Any':>5} {'ignores':>8}")
    for label, c in counts.items():
        print(f"{label:<22} {c.params:>7} {c.returns:>8} {c.any_total:>5} {c.ignores:>8}")
    total = Count(*(sum(getattr(c, f) for c in counts.values()) for f in
                    ("params", "returns", "ignores")))
    print(f"{'total':<22} {total.params:>7} {total.returns:>8} {total.any_total:>5} "
          f"{total.ignores:>8}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
