"""``bootstrap.py`` installs without pip's one-process bytecode compilation. ``run`` then
compiles what the main job imports by importing it (``WARM_IMPORTS``, two processes); a
failure there is only a note, so this checks that list imports in the suite's environment
(a superset of the run's). ``test`` compiles every installed module on every core while
the Tinker server's environment is built."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def _bootstrap() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bootstrap_imports", ROOT / "bootstrap.py")
    assert spec and spec.loader
    bootstrap = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bootstrap)
    return bootstrap


def test_the_main_jobs_import_list_imports() -> None:
    bootstrap = _bootstrap()
    for code in bootstrap.WARM_IMPORTS:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=300, check=False)  # fmt: skip
        assert out.returncode == 0, out.stderr[-2000:]


def test_every_installed_module_is_compiled_and_invalid_files_do_not_fail_it(
    tmp_path: Path,
) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(sysconfig.get_paths(vars={"base": str(env_dir), "platbase": str(env_dir)})
                ["purelib"])  # fmt: skip
    package = site / "probe_pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("VALUE = 1\n")
    (package / "legacy.py").write_text("print 'python 2 only'\n")  # shipped by some wheels
    process = _bootstrap()._compile_everything(python)
    assert process.wait(timeout=120) == 0
    compiled = sorted(p.name for p in (package / "__pycache__").iterdir())
    assert compiled == [f"__init__.{sys.implementation.cache_tag}.pyc"]
