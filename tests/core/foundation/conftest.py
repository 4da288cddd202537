"""Fixtures for the foundation tests: throw-away plugin distributions installed for real."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest


def _write_dist(root: Path, dist: str, module: str, body: str, ep_name: str) -> Path:
    src = root / dist
    (src / module).mkdir(parents=True)
    (src / module / "__init__.py").write_text(textwrap.dedent(body))
    (src / "pyproject.toml").write_text(
        textwrap.dedent(
            f"""
            [build-system]
            requires = ["setuptools>=61"]
            build-backend = "setuptools.build_meta"

            [project]
            name = "{dist}"
            version = "1.2.3"

            [project.entry-points.rollhub]
            {ep_name} = "{module}"

            [tool.setuptools]
            packages = ["{module}"]
            """
        )
    )
    return src


@pytest.fixture
def install_plugin(tmp_path: Path) -> Callable[..., dict[str, str]]:
    """Build and ``pip install`` a plugin distribution into a private target dir.

    Returns the environment (``PYTHONPATH``) under which the installed plugin is visible,
    so the real entry-point machinery finds it in a subprocess.
    """
    target = tmp_path / "site"

    def install(dist: str, module: str, body: str, ep_name: str) -> dict[str, str]:
        src = _write_dist(tmp_path / "src", dist, module, body, ep_name)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-deps",
                "--no-build-isolation",
                "--target",
                str(target),
                str(src),
            ],
            check=True,
            capture_output=True,
        )
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(target), env.get("PYTHONPATH", "")])
        return env

    return install
