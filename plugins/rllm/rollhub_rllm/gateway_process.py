"""A real ``rllm-model-gateway`` server run as a child process on loopback.

The gateway is started as ``python -m rllm_model_gateway --config <yaml>`` with its own data
directory (SQLite traces, config, log). The YAML carries what its command line cannot:
``sync_traces`` (non-streaming traces are written before the reply) and the worker health
interval. It binds 127.0.0.1 only (its default host is 0.0.0.0), is probed on ``/health``
until it answers, and is stopped by its PID (SIGTERM lets it drain pending trace writes).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import logging
import socket
import sys
import tempfile
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

import httpx
from rollhub.errors import ConfigError, TokenRetrievalError

__all__ = ["GatewayProcess", "GatewaySettings"]

log = logging.getLogger(__name__)

_LIVE: weakref.WeakSet[GatewayProcess] = weakref.WeakSet()


@dataclass(frozen=True)
class GatewaySettings:
    """How to start the gateway (see ``RllmSourceOptions`` for the meaning of each)."""

    engine_url: str
    host: str = "127.0.0.1"
    port: int = 0
    store: str = "sqlite"
    sync_traces: bool = True
    health_check_interval_s: float = 10.0
    startup_timeout_s: float = 30.0
    data_dir: str | None = None
    log_level: str = "WARNING"


class GatewayProcess:
    """Start, probe and stop one ``rllm-model-gateway`` child process."""

    def __init__(self, settings: GatewaySettings) -> None:
        self.settings = settings
        self.url: str | None = None
        self.log_path: Path | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    @property
    def pid(self) -> int | None:
        """The child's PID while it runs."""
        return self._proc.pid if self._proc and self._proc.returncode is None else None

    async def start(self) -> str:
        """Start the gateway and wait until ``/health`` answers; return its root URL.

        :raises ConfigError: ``rllm-model-gateway`` is not installed.
        :raises TokenRetrievalError: it exited or did not answer within the startup timeout.
        """
        if self.url is not None:
            return self.url
        try:
            import rllm_model_gateway  # noqa: F401  - only to fail early with the fix
        except ImportError as exc:
            raise ConfigError(
                "token_source 'rllm' needs the rllm-model-gateway package: "
                "pip install 'rollhub-rllm[gateway]'",
                field="token_source.name",
            ) from exc
        s = self.settings
        if s.data_dir:
            data = Path(s.data_dir).expanduser()
            data.mkdir(parents=True, exist_ok=True)
        else:
            self._tmp = tempfile.TemporaryDirectory(prefix="rllm-gateway-")
            data = Path(self._tmp.name)
        # a port picked here can be taken before the child binds it: try a few
        attempts = 1 if s.port else 3
        last = ""
        for _ in range(attempts):
            port = s.port or _free_port(s.host)
            url = f"http://{s.host}:{port}"
            last = await self._launch(data, port, url)
            if not last:
                self.url = url
                _LIVE.add(self)
                log.info("rllm-model-gateway (pid %s) serving %s → %s", self.pid, url, s.engine_url)
                return url
        tail = _tail(self.log_path)
        await self.stop()  # a temp data dir goes too: the log's end is in the message
        raise TokenRetrievalError(
            f"rllm-model-gateway did not start on {s.host}: {last}; its log ends: {tail}",
            field="token_source",
        )

    async def _launch(self, data: Path, port: int, url: str) -> str:
        """Start one child; return '' once healthy, else why it failed (child stopped)."""
        s = self.settings
        db_path = str(data / "traces.db")
        config = {
            "host": s.host,
            "port": port,
            "workers": [{"url": s.engine_url, "worker_id": "0"}],
            "db_path": db_path,
            "store_worker": s.store,
            "sync_traces": s.sync_traces,
            "health_check_interval": s.health_check_interval_s,
            "log_level": s.log_level,
        }
        config_path = data / "gateway.yaml"
        # JSON is valid YAML: no YAML writer needed
        config_path.write_text(json.dumps(config))
        self.log_path = data / "gateway.log"
        with open(self.log_path, "ab") as out:
            # the flags repeat the YAML because RLLM_GATEWAY_* variables would override it
            self._proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "rllm_model_gateway", "--config", str(config_path),
                "--host", s.host, "--port", str(port), "--db-path", db_path,
                "--store", s.store, "--log-level", s.log_level,
                stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=asyncio.subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.monotonic() + s.startup_timeout_s
        async with httpx.AsyncClient(timeout=2.0, trust_env=False) as client:
            while time.monotonic() < deadline:
                if self._proc.returncode is not None:
                    return f"it exited with code {self._proc.returncode}"
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(f"{url}/health")).status_code == 200:
                        return ""
                await asyncio.sleep(0.05)
        await self.stop()
        return f"no answer on {url}/health within {s.startup_timeout_s:.0f}s"

    async def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM (pending trace writes drain), then SIGKILL after ``timeout_s``. Idempotent."""
        proc, self._proc = self._proc, None
        self.url = None
        if proc is not None and proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), timeout_s)
            except TimeoutError:
                log.warning("rllm-model-gateway (pid %d) ignored SIGTERM; killing it", proc.pid)
                proc.kill()
                await proc.wait()
        _LIVE.discard(self)
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def kill_now(self) -> None:
        """Kill the child without waiting (interpreter exit)."""
        if self._proc is not None and self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()


def _tail(path: Path | None, size: int = 600) -> str:
    if path is None or not path.exists():
        return "(no log)"
    text = path.read_bytes()[-size:].decode(errors="replace").strip()
    return text or "(empty)"


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@atexit.register
def _kill_children() -> None:
    for gw in list(_LIVE):
        gw.kill_now()
