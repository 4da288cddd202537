"""Each package's import graph has no cycle, no module over 400 lines and no more than 20
modules at its root.

The graph is read with ``ast``: every ``import`` counts, at module level, under
``if TYPE_CHECKING:`` and inside functions alike, so a cycle cannot hide behind a local or a
type-only import. ``from pkg import name`` counts as an import of ``pkg.name`` when that is a
module, else of ``pkg``. A package's ``__init__`` that re-exports its own submodules does
not make a cycle with them (Python runs ``pkg/__init__`` first, and the submodule does not
depend on it).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: lines in one module, in every package; a longer one is split at a seam
MAX_LINES = 400
#: modules side by side at a package's root (``__init__`` not counted); more goes into
#: subpackages named for what their modules share
MAX_ROOT_MODULES = 20
#: package name -> why its root may hold more, for now
ROOT_MODULES_EXEMPT: dict[str, str] = {}

#: package name -> its source folder
PACKAGES = {
    "rollhub": ROOT / "core" / "rollhub",
    "rollhub_gateway": ROOT / "gateway" / "rollhub_gateway",
    "rollhub_sandbox": ROOT / "sandbox" / "rollhub_sandbox",
    **{p.name: p for p in sorted(ROOT.glob("plugins/*/rollhub_*"))},
}


def _module_name(package: str, folder: Path, path: Path) -> str:
    parts = list(path.relative_to(folder).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([package, *parts])


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _imported(name: str, is_package: bool, target: str) -> set[str]:
    """What importing ``target`` from module ``name`` runs: the target and every package
    above it, except the packages ``name`` itself sits in (already being imported)."""
    own = name if is_package else name.rpartition(".")[0]
    run = set()
    while target:
        if target != name and not (own + ".").startswith(target + "."):
            # a package's __init__ re-exporting its own submodules is not a cycle
            if not (is_package and target.startswith(name + ".")):
                run.add(target)
        target = target.rpartition(".")[0]
    return run


def import_graph(package: str, folder: Path) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports (anywhere in its body)."""
    files = {_module_name(package, folder, p): p for p in sorted(folder.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        is_package = path.name == "__init__.py"
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                source = _resolve(name, is_package, node)
                targets = [
                    f"{source}.{alias.name}" if f"{source}.{alias.name}" in files else source
                    for alias in node.names
                ]
            else:
                continue
            for target in targets:
                while target and target not in files:  # ``import a.b.c`` where c is a name
                    target = target.rpartition(".")[0]
                edges.update(_imported(name, is_package, target))
        graph[name] = edges
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_checker_sees_type_only_and_local_imports(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from pkg.a import A\n")
    (pkg / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\nA = 1\n"
    )
    (pkg / "b.py").write_text("def f():\n    from . import a\n    return a\n")
    (pkg / "c.py").write_text("import pkg.b\n")
    (pkg / "sub").mkdir()
    (pkg / "sub" / "__init__.py").write_text("from pkg.c import C\n")
    (pkg / "sub" / "d.py").write_text("")
    (pkg / "e.py").write_text("from pkg.sub.d import D\n")
    graph = import_graph("pkg", pkg)
    assert graph == {
        "pkg": set(), "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}, "pkg.c": {"pkg.b"},
        "pkg.sub": {"pkg.c"}, "pkg.sub.d": set(), "pkg.e": {"pkg.sub", "pkg.sub.d"},
    }
    assert find_cycles(graph) == [["pkg.a", "pkg.b"]]


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_no_import_cycles(package):
    cycles = find_cycles(import_graph(package, PACKAGES[package]))
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_no_module_over_the_size_limit(package):
    sizes = {
        str(p.relative_to(ROOT)): len(p.read_text().splitlines())
        for p in PACKAGES[package].rglob("*.py")
    }
    over = {path: n for path, n in sorted(sizes.items()) if n > MAX_LINES}
    assert not over, f"modules over {MAX_LINES} lines (split them at a seam): {over}"


def root_modules(folder: Path) -> list[str]:
    """The modules directly in a package's folder, ``__init__`` aside."""
    return sorted(p.stem for p in folder.glob("*.py") if p.name != "__init__.py")


def test_root_modules_counts_only_the_root(tmp_path):
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "a.py").write_text("")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "__init__.py").write_text("")
    (tmp_path / "sub" / "b.py").write_text("")
    assert root_modules(tmp_path) == ["a"]


@pytest.mark.parametrize("package", sorted(set(PACKAGES) - set(ROOT_MODULES_EXEMPT)))
def test_no_package_root_over_the_module_limit(package):
    modules = root_modules(PACKAGES[package])
    assert len(modules) <= MAX_ROOT_MODULES, (
        f"{package} holds {len(modules)} modules at its root (at most {MAX_ROOT_MODULES}): "
        f"group the ones that share a concept into subpackages: {modules}"
    )


def test_every_root_exemption_names_a_package():
    assert set(ROOT_MODULES_EXEMPT) <= set(PACKAGES)
