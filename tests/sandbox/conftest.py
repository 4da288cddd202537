"""Fixtures of the sandbox tests: local clients on a per-test root directory."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from rollhub_sandbox import AsyncSandboxClient, SandboxClient


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "sandboxes"
    path.mkdir()
    return path


@pytest.fixture
async def client(root: Path) -> AsyncIterator[AsyncSandboxClient]:
    c = AsyncSandboxClient("local", root=str(root), kill_grace=0.5)
    yield c
    await c.aclose()


@pytest.fixture
def sync_client(root: Path) -> Iterator[SandboxClient]:
    c = SandboxClient("local", root=str(root), kill_grace=0.5)
    yield c
    c.close()


@pytest.fixture
def template(tmp_path: Path) -> Path:
    tpl = tmp_path / "template"
    (tpl / "pkg").mkdir(parents=True)
    (tpl / "pkg" / "mod.py").write_text("X = 1\n")
    (tpl / "README").write_text("template\n")
    os.chmod(tpl / "README", 0o644)
    return tpl
