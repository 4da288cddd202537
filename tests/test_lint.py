"""The whole tree passes ruff and mypy (both configured in the root pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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


def test_mypy_passes():
    # configured in the root pyproject.toml ([tool.mypy]); its cache makes reruns quick
    out = subprocess.run(
        [sys.executable, "-m", "mypy", *_typed_packages()],
        cwd=ROOT, capture_output=True, text=True, timeout=1200,
    )
    assert out.returncode == 0, out.stdout + out.stderr
