"""Every ``rollhub…`` name the README and docs write in code spans imports.

A user copies these paths; one that moved without its old path still working breaks them.
A name is resolved as the longest importable module prefix plus attributes. A module whose
own third-party dependency is absent here (verl's agent loop needs verl, which needs a
GPU machine) must at least exist as a file of its package.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
NAME = re.compile(r"`((?:rollhub|rollhub_[a-z]+)(?:\.[A-Za-z_][A-Za-z0-9_]*)+)")
#: file names that look like dotted paths
FILES = {"rollhub.toml"}


def documented_names() -> dict[str, str]:
    """Dotted name -> the first page that writes it."""
    names: dict[str, str] = {}
    for page in DOCS:
        for m in NAME.finditer(page.read_text(encoding="utf-8")):
            if m.group(1) not in FILES:
                names.setdefault(m.group(1), str(page.relative_to(ROOT)))
    return names


def resolve(name: str) -> object:
    """The module or attribute ``name`` denotes."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        module = ".".join(parts[:i])
        try:
            obj: object = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name is not None and (module + ".").startswith(exc.name + "."):
                continue  # this prefix is not a module: try a shorter one
            if not (exc.name or "").startswith("rollhub"):
                # the module exists but needs a third-party package absent here
                assert importlib.util.find_spec(module) is not None, name
                return module
            raise
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(name)


def test_the_docs_name_something() -> None:
    assert len(documented_names()) > 100


@pytest.mark.parametrize(("name", "page"), sorted(documented_names().items()))
def test_a_documented_name_imports(name: str, page: str) -> None:
    try:
        resolve(name)
    except (ImportError, AttributeError) as exc:
        pytest.fail(f"{page} names {name}, which does not import: {exc}")
