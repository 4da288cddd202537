"""The gateway's modules import each other without a cycle and stay small.

Every import counts: module level, function-local, and type-only (under
``if TYPE_CHECKING:``), so a cycle cannot hide behind a deferred import. Run as a script
(``python tests/gateway/test_import_graph.py``) it prints the graph's size and its cycles.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "gateway" / "rollhub_gateway"
#: the longest a gateway module may be
MAX_LINES = 450


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    """Dotted module name → file, for every module of the package at ``root``."""
    found = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def import_graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module → the package's modules it imports (anywhere in its body)."""
    package = next(iter(mods)).split(".")[0]

    def known(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        deps: set[str | None] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                deps.update(known(a.name) for a in node.names if a.name.startswith(package))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    here = name.split(".")[: None if path.name == "__init__.py" else -1]
                    here = here[: len(here) - node.level + 1]
                    base = ".".join([*here, base] if base else here)
                if base.split(".")[0] == package:
                    for a in node.names:
                        full = f"{base}.{a.name}"
                        deps.add(full if full in mods else known(base))
        graph[name] = {d for d in deps if d is not None and d != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def long_modules(mods: Iterable[Path], limit: int = MAX_LINES) -> dict[str, int]:
    """Files of more than ``limit`` lines, with their length."""
    out = {}
    for path in mods:
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > limit:
            out[str(path.relative_to(PACKAGE.parent))] = n
    return out


def test_gateway_imports_have_no_cycle() -> None:
    assert cycles(import_graph(modules())) == []


def test_a_cycle_is_found(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..c import C\n"
    )
    (pkg / "c.py").write_text("def f():\n    import pkg.a\n")
    assert cycles(import_graph(modules(pkg))) == [["pkg.a", "pkg.c", "pkg.sub.b"]]


def test_no_gateway_module_is_too_long() -> None:
    assert long_modules(modules().values()) == {}


if __name__ == "__main__":
    graph = import_graph(modules())
    found = cycles(graph)
    edges = sum(len(d) for d in graph.values())
    print(f"{len(graph)} modules, {edges} import edges (module-level, local and type-only)")
    print("\n".join(f"cycle: {' -> '.join(c)}" for c in found) or "no cycle")
    longest = sorted(((len(p.read_text().splitlines()), n) for n, p in modules().items()))[-3:]
    print("longest:", ", ".join(f"{n} {lines}" for lines, n in reversed(longest)))
    sys.exit(1 if found else 0)
