"""``bootstrap.py run`` installs without pip's bytecode compilation and then compiles what
the main job imports by importing it (``WARM_IMPORTS``, two processes); a failure there is only a note, so
this checks that list imports in the suite's environment (a superset of the run's)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_main_jobs_import_list_imports() -> None:
    spec = importlib.util.spec_from_file_location("bootstrap_imports", ROOT / "bootstrap.py")
    assert spec and spec.loader
    bootstrap = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bootstrap)
    for code in bootstrap.WARM_IMPORTS:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=300, check=False)  # fmt: skip
        assert out.returncode == 0, out.stderr[-2000:]
