"""The whole tree passes ruff and mypy (both configured in the root pyproject.toml)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

from tests.dependency_envs import held, shared_dir

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_check_passes():
    out = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--output-format", "concise", "."],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def _typed_packages() -> list[str]:
    """The core, the gateway, the sandbox and every plugin package, as paths from the root."""
    plugins = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("plugins/*/rollhub_*"))
    return ["core/rollhub", "gateway/rollhub_gateway", "sandbox/rollhub_sandbox", *plugins]


def test_the_type_check_covers_every_package():
    packages = _typed_packages()
    assert {"plugins/torch/rollhub_torch", "plugins/trl/rollhub_trl"} <= set(packages)
    assert all((ROOT / p / "__init__.py").exists() for p in packages)


def _mypy_cache_dir() -> Path:
    """mypy's cache, shared by this machine's checkouts while the pins are unchanged.

    Most of a cold run (80-90 s on two cores) analyses the installed packages, the same in
    every checkout with the same pins. mypy checks each cached module against the hash of
    its source and of what it imports, so a cache another checkout wrote is reused only
    where the code is the same. Its SQLite file takes one writer at a time, so checkouts
    take turns (:func:`held`).
    """
    key = hashlib.sha256(sys.version.encode())
    for pins in (ROOT / "requirements" / "dev.txt", ROOT / "pyproject.toml"):
        key.update(pins.read_bytes())
    return shared_dir("mypy", key.hexdigest()[:16], lambda path: path.mkdir(parents=True))


def test_mypy_passes():
    # configured in the root pyproject.toml ([tool.mypy])
    cache = _mypy_cache_dir()
    with held(cache):
        out = subprocess.run(
            [sys.executable, "-m", "mypy", "--cache-dir", str(cache), *_typed_packages()],
            cwd=ROOT, capture_output=True, text=True, timeout=1200,
        )
    assert out.returncode == 0, out.stdout + out.stderr
