"""Runs the verl-side suite (verl_side/) in its own environment and asserts it passed.

verl 0.9.1 pins ``transformers<5.11`` and ``tensordict<=0.10``; the shared environment has
newer ones. The third-party packages of ``plugins/verl/requirements-test.txt`` are
installed once per machine into a shared environment (``tests/dependency_envs.py``, about
3 minutes the first time), rebuilt when that file, a pyproject it installs or the Python
version changes. The checkout's own ``.venvs/verl`` (git-ignored) holds rollhub's
packages, editable, and reads the shared one's after them: seconds to make, so
``python3 bootstrap.py test`` covers verl on a fresh clone.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import time
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.dependency_envs import dependency_env, pip, thin_venv

ROOT = Path(__file__).resolve().parents[3]
VENV = Path(os.environ.get("ROLLHUB_VERL_VENV", ROOT / ".venvs" / "verl"))
PY = VENV / "bin" / "python"
REQUIREMENTS = ROOT / "plugins" / "verl" / "requirements-test.txt"
INPUTS = (
    REQUIREMENTS,
    ROOT / "core" / "pyproject.toml",
    ROOT / "gateway" / "pyproject.toml",
    ROOT / "plugins" / "verl" / "pyproject.toml",
)
#: tests of the verl side that may skip here, and why
MAY_SKIP = {"test_one_grpo_step_on_gpu": "needs CUDA and vLLM"}


def fingerprint() -> str:
    """Hash of everything the environment is built from."""
    h = hashlib.sha256()
    for path in INPUTS:
        h.update(str(path.relative_to(ROOT)).encode())
        h.update(path.read_bytes())
    h.update(sys.version.encode())
    return h.hexdigest()


def _editable_dirs() -> list[str]:
    """The checkout's packages the requirements file installs (its ``-e`` lines)."""
    lines = REQUIREMENTS.read_text().splitlines()
    return [x.split(None, 1)[1].strip() for x in lines if x.startswith("-e ")]


def _install_dependencies(python: Path) -> None:
    """Everything the requirements file installs but the checkout's own packages."""
    ours = [tomllib.loads((ROOT / d / "pyproject.toml").read_text())["project"]["name"]
            for d in _editable_dirs()]  # fmt: skip
    pip(python, "install", "--quiet", "--upgrade", "pip>=24", cwd=ROOT)
    # what `pip install --no-build-isolation -e` needs to build rollhub's packages here
    build = ["hatchling>=1.21", "editables"]
    # bytecode as modules are first imported: the tests import a fraction of what this installs
    pip(python, "install", "--quiet", "--no-compile", "-r", str(REQUIREMENTS), *build,
        cwd=ROOT)
    pip(python, "uninstall", "--quiet", "--yes", *ours, cwd=ROOT)


def ensure_env() -> float:
    """Make ``.venvs/verl`` (and the shared environment) unless current; return the
    seconds spent."""
    t0 = time.monotonic()
    want = fingerprint()
    dependencies = dependency_env("verl", want[:16], _install_dependencies)
    VENV.parent.mkdir(parents=True, exist_ok=True)
    stamp = VENV / ".rollhub-verl.sha256"
    with open(VENV.parent / ".verl.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test runs must not make it at once
        if stamp.exists() and stamp.read_text() == f"{want} {dependencies}" and PY.exists():
            return time.monotonic() - t0
        python = thin_venv(VENV, dependencies)
        editable = [arg for d in _editable_dirs() for arg in ("-e", d)]
        pip(python, "install", "--quiet", "--no-deps", "--no-build-isolation", *editable, cwd=ROOT)
        stamp.write_text(f"{want} {dependencies}")
        return time.monotonic() - t0


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_verl_side_suite_passes(tmp_path):
    built = ensure_env()
    if built > 1:
        print(f"verl test environment built in {built:.0f} s")
    report = tmp_path / "verl.xml"
    proc = subprocess.run(
        [str(PY), "-m", "pytest", "tests/plugins/verl/verl_side", "-q", "-p", "no:cacheprovider",
         f"--junitxml={report}"],
        cwd=ROOT, capture_output=True, text=True, timeout=1500,
        env={**os.environ, "PYTHONPATH": ""},
    )  # fmt: skip
    tail = (proc.stdout + proc.stderr)[-6000:]
    assert proc.returncode == 0, tail
    suite = ET.parse(report).getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    assert int(suite.get("failures", 0)) == 0 and int(suite.get("errors", 0)) == 0, tail
    assert int(suite.get("tests", 0)) >= 10, tail
    skipped = [c.get("name") for c in suite.iter("testcase") if c.find("skipped") is not None]
    assert all(name.split("[")[0] in MAY_SKIP for name in skipped), (skipped, tail)
