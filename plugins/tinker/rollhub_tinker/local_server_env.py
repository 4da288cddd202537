"""The local Tinker server's own environment: a pinned Python 3.11 venv and the converted model.

Built once per machine under :func:`default_env_dir` and reused while a sha256 stamp of the
pins matches; :class:`~rollhub_tinker.local_server.LocalTinkerServer` runs the server from it.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from rollhub.errors import ConfigError, RollhubError

__all__ = [
    "ENV_DIR_VAR",
    "LocalServerError",
    "ServerEnvironment",
    "SetupInfo",
    "default_env_dir",
]

log = logging.getLogger(__name__)

#: environment variable that moves the environment, model and state directory
ENV_DIR_VAR = "ROLLHUB_TINKER_LOCAL_DIR"
#: the Python the server environment is built for (skyrl 0.3.0 plus the launcher's patches)
SERVER_PYTHON = (3, 11)
REQUIREMENTS = Path(__file__).with_name("server-requirements.txt")
LAUNCHER = Path(__file__).with_name("local_server_main.py")
MODEL_NAME = "smollm2-135m-instruct"
_STAMP = ".rollhub-stamp"
# Bumped when what setup produces changes without a change of pins (e.g. the conversion).
_SETUP_VERSION = "1"
#: pip compiles bytecode in one process; this compiles the installed modules on every core,
#: beside the model's conversion (files that are not valid Python 3 are skipped)
_COMPILE = (
    "import compileall, sysconfig\n"
    "paths = sysconfig.get_paths()\n"
    "for path in sorted({paths['purelib'], paths['platlib']}):\n"
    "    compileall.compile_dir(path, quiet=2, workers=0)\n"
)


class LocalServerError(RollhubError):
    """Setting up or running the local Tinker server failed. Context: ``log`` (a file path)."""


@dataclass(frozen=True)
class SetupInfo:
    """What :meth:`ServerEnvironment.setup` left, and whether it was already there."""

    env_dir: Path
    python: Path
    model_dir: Path
    reused: bool
    seconds: float


def default_env_dir() -> Path:
    """``$ROLLHUB_TINKER_LOCAL_DIR``, else ``$XDG_CACHE_HOME`` or ``~/.cache`` + rollhub/tinker-local."""
    override = os.environ.get(ENV_DIR_VAR)
    if override:
        return Path(override).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache).expanduser() / "rollhub" / "tinker-local"


class ServerEnvironment:
    """The server's virtual environment and model directory under ``env_dir``.

    :param env_dir: where the environment and model live (default :func:`default_env_dir`).
    :param python: interpreter to build the environment with (default: this one when it is
        3.11, else ``python3.11`` on PATH).
    :param requirements: the pinned requirements file (default: the one shipped here).
    """

    def __init__(
        self,
        env_dir: str | os.PathLike[str] | None = None,
        *,
        python: str | None = None,
        requirements: str | os.PathLike[str] | None = None,
    ) -> None:
        self.env_dir = Path(env_dir).expanduser() if env_dir else default_env_dir()
        self.requirements = Path(requirements) if requirements else REQUIREMENTS
        self._base_python = python

    @property
    def python(self) -> Path:
        """The server environment's interpreter."""
        return self.env_dir / "venv" / "bin" / "python"

    @property
    def model_dir(self) -> Path:
        """The converted base model (safetensors and tokenizer)."""
        return self.env_dir / "models" / MODEL_NAME

    @property
    def compilation_cache_dir(self) -> Path:
        """JAX's persistent compilation cache, shared by every server started from here."""
        return self.env_dir / "jax-cache"

    @property
    def base_model(self) -> str:
        """The ``base_model`` string clients pass: the model directory (same machine)."""
        return str(self.model_dir)

    def expected_stamp(self) -> str:
        """sha256 of what the environment is built from: the pins and the setup version."""
        digest = hashlib.sha256()
        digest.update(f"{_SETUP_VERSION}\0{SERVER_PYTHON}\0{MODEL_NAME}\0".encode())
        digest.update(self.requirements.read_bytes())
        return digest.hexdigest()

    def is_set_up(self) -> bool:
        """Whether the environment and model exist and were built from the current pins."""
        stamp = self.env_dir / "venv" / _STAMP
        return (
            self.python.exists()
            and (self.model_dir / "config.json").exists()
            and stamp.exists()
            and stamp.read_text().strip() == self.expected_stamp()
        )

    def setup(self, *, force: bool = False) -> SetupInfo:
        """Build the environment and convert the model, unless the stamp says they are current.

        Safe to call from several processes at once: a file lock serialises the builders.

        :raises LocalServerError: pip or the conversion failed (the message names the log).
        :raises ConfigError: no Python 3.11 interpreter was found.
        """
        started = time.monotonic()
        self.env_dir.mkdir(parents=True, exist_ok=True)
        with open(self.env_dir / ".setup.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not force and self.is_set_up():
                log.info("tinker-local environment %s is current", self.env_dir)
                return self._info(reused=True, started=started)
            self._build(self.env_dir / "setup.log")
        info = self._info(reused=False, started=started)
        log.info("tinker-local environment built in %.0f s", info.seconds)
        return info

    def _info(self, *, reused: bool, started: float) -> SetupInfo:
        return SetupInfo(
            self.env_dir, self.python, self.model_dir, reused, time.monotonic() - started
        )

    def _build(self, log_path: Path) -> None:
        venv = self.env_dir / "venv"
        (venv / _STAMP).unlink(missing_ok=True)
        shutil.rmtree(venv, ignore_errors=True)
        # compiled by the JAX being replaced: its entries would never be read again
        shutil.rmtree(self.compilation_cache_dir, ignore_errors=True)
        pins = self.requirements.read_text().splitlines()
        torch_pin = next((line for line in pins if line.startswith("torch==")), None)
        with open(log_path, "w") as out:
            self._step(out, log_path, [self._find_base_python(), "-m", "venv", str(venv)])
            pip = [str(self.python), "-m", "pip", "install", "--no-input", "--progress-bar", "off",
                   "--no-compile"]  # fmt: skip
            if torch_pin:
                # torch first and with its dependencies: they differ by platform and build.
                self._step(out, log_path, [*pip, torch_pin])
            self._step(out, log_path, [*pip, "--no-deps", "-r", str(self.requirements)])
            compiling = subprocess.Popen(
                [str(self.python), "-c", _COMPILE], stdout=out, stderr=subprocess.STDOUT
            )
            try:
                self._step(
                    out,
                    log_path,
                    [str(self.python), "-P", str(LAUNCHER), "convert", "--out",
                     str(self.model_dir)],
                    env=self._server_env(),
                )  # fmt: skip
            finally:
                # bytecode is a cache: a failure costs the first imports their compiling
                if compiling.wait() != 0:
                    log.warning("tinker-local setup: compiling bytecode failed (exit %d); "
                                "continuing", compiling.returncode)  # fmt: skip
        (venv / _STAMP).write_text(self.expected_stamp() + "\n")

    def _find_base_python(self) -> str:
        if self._base_python:
            return self._base_python
        if sys.version_info[:2] == SERVER_PYTHON:
            return sys.executable
        found = shutil.which("python{}.{}".format(*SERVER_PYTHON))
        if found is None:
            raise ConfigError(
                "the local Tinker server needs Python 3.11 (skyrl 0.3.0 and its patches); "
                "none is on PATH: install python3.11 or pass --python /path/to/python3.11",
                field="python",
            )
        return found

    @staticmethod
    def _step(
        out: IO[str], log_path: Path, cmd: list[str], env: dict[str, str] | None = None
    ) -> None:
        log.info("tinker-local setup: %s", " ".join(cmd))
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        code = subprocess.call(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        if code != 0:
            raise LocalServerError(
                f"tinker-local setup step failed (exit {code}): {' '.join(cmd[:6])} ...; "
                f"see {log_path}",
                log=str(log_path),
            )

    def _server_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        env.pop("VIRTUAL_ENV", None)
        # Everything is local: no hub look-ups, JAX on the CPU, logs as they happen.
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", JAX_PLATFORMS="cpu")
        env["PYTHONUNBUFFERED"] = "1"
        # Each server would otherwise compile the same XLA programs again (model set-up,
        # each padded length of sampling and training): ~5 s of every start and most of a
        # first sample. JAX keys entries by program, JAX version and machine. The set-up's
        # programs compile in well under JAX's default 1 s minimum but are many, hence 0.
        # What the user set is left as it is.
        env.setdefault("JAX_COMPILATION_CACHE_DIR", str(self.compilation_cache_dir))
        env.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
        return env
