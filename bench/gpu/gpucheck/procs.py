"""Servers of a check (vLLM, the gateway): started on 127.0.0.1 in their own process group,
waited for over HTTP, always stopped (the whole group), their output kept in a log file."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

__all__ = ["Server", "free_port", "http_json", "run_logged"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_json(
    method: str, url: str, body: Any = None, *, token: str | None = None, timeout: float = 120
) -> Any:
    """One JSON request; raises ``RuntimeError`` with the status and body on an error status."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as exc:
        raise RuntimeError(f"{method} {url}: HTTP {exc.code}: {exc.read()[:500]!r}") from exc
    return json.loads(raw) if raw else None


class Server:
    """``with Server(name, argv, health_url, log_path) as s:`` starts the process, waits until
    ``health_url`` answers 200, and stops its process group on the way out."""

    def __init__(
        self, name: str, argv: list[str], health_url: str, log_path: Path, *,
        env: dict[str, str] | None = None, cwd: Path | None = None, start_timeout_s: float = 300,
    ) -> None:  # fmt: skip
        self.name, self.argv, self.health_url = name, argv, health_url
        self.log_path, self.env, self.cwd = log_path, env, cwd
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Server:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "wb")
        try:
            self.proc = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.cwd,
                env={**os.environ, **(self.env or {})}, start_new_session=True,
            )  # fmt: skip
        finally:
            log.close()
        try:
            self.wait_healthy()
        except BaseException:
            self.stop()
            raise

    def wait_healthy(self) -> None:
        """Poll ``health_url`` until it answers 200; raise if the process exits or time runs out."""
        assert self.proc is not None
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.proc.returncode} before it was ready: "
                    f"{self.tail()}"
                )
            try:
                with urllib.request.urlopen(self.health_url, timeout=5) as resp:
                    if resp.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(1.0)
        raise RuntimeError(
            f"{self.name} not ready after {self.start_timeout_s:.0f} s: {self.tail()}"
        )

    def tail(self, chars: int = 1500) -> str:
        """The end of the server's output."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self, grace_s: float = 20) -> None:
        """SIGTERM the process group, then SIGKILL it if it has not exited after ``grace_s``."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(wait)
                if sig == signal.SIGTERM:
                    # the leader is gone; children of the group may not be
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                break
            except subprocess.TimeoutExpired:
                continue


def run_logged(
    argv: list[str], log_path: Path, timeout_s: float, *,
    env: dict[str, str] | None = None, cwd: Path | None = None,
) -> tuple[int | None, str]:  # fmt: skip
    """Run ``argv`` in its own process group with its output in ``log_path``; on timeout the
    whole group is killed. Returns ``(exit code or None on timeout, output)``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, cwd=cwd,
            env={**os.environ, **(env or {})}, start_new_session=True,
        )  # fmt: skip
        try:
            code: int | None = proc.wait(max(1.0, timeout_s))
        except subprocess.TimeoutExpired:
            code = None
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # Ray and vLLM leave children behind
            except ProcessLookupError:
                pass
            proc.wait()
    return code, log_path.read_text(errors="replace")
