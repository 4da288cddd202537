"""The C health shim, built into a temp dir and spoken to over real HTTP on 127.0.0.1."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.sandbox.sandbox_helpers import CC, build_shim, start_shim

pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler (cc/gcc) on PATH")


@pytest.fixture(scope="module")
def shim_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Without a static libc the dynamic build serves the tests (build_shim says which).
    return build_shim(tmp_path_factory.mktemp("shim") / "rollhub-shim")[0]


class Shim:
    def __init__(self, binary: Path) -> None:
        self.proc, self.port = start_shim(binary)

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, dict]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, json.loads(resp.read() or b"{}")
        finally:
            conn.close()

    def invoke(self, payload: object) -> tuple[int, dict]:
        return self.request("POST", "/invocations", json.dumps(payload).encode(),
                            {"Content-Type": "application/json"})

    def raw(self, data: bytes) -> bytes:
        chunks = []
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as s:
            # The shim may answer and close before it has read everything (431, 413).
            with contextlib.suppress(OSError):
                s.sendall(data)
                s.shutdown(socket.SHUT_WR)
            with contextlib.suppress(ConnectionResetError):
                while chunk := s.recv(65536):
                    chunks.append(chunk)
        return b"".join(chunks)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


@pytest.fixture
def shim(shim_binary: Path) -> Iterator[Shim]:
    s = Shim(shim_binary)
    yield s
    s.stop()


def test_ping_and_busy_flag(shim: Shim) -> None:
    before = int(time.time())
    status, body = shim.request("GET", "/ping")
    assert status == 200 and body["status"] == "Healthy"
    assert set(body) == {"status", "time_of_last_update"}
    assert abs(body["time_of_last_update"] - before) <= 2
    status, body = shim.invoke({"action": "start"})
    assert (status, body["status"], body["busy"]) == (200, "HealthyBusy", True)
    assert shim.request("GET", "/ping")[1]["status"] == "HealthyBusy"
    assert shim.invoke({"action": "status"})[1]["status"] == "HealthyBusy"
    status, body = shim.invoke({"action": "stop"})
    assert (body["status"], body["busy"]) == ("Healthy", False)
    assert shim.request("GET", "/ping?x=1")[1]["status"] == "Healthy"


def test_ttl_clears_busy(shim: Shim) -> None:
    assert shim.invoke({"ttl": 0.6, "action": "start"})[1]["status"] == "HealthyBusy"
    time.sleep(0.3)
    assert shim.request("GET", "/ping")[1]["status"] == "HealthyBusy"  # sub-second ttl holds
    time.sleep(0.5)
    _, body = shim.request("GET", "/ping")
    assert body["status"] == "Healthy"
    assert shim.invoke({"action": "status"})[1]["busy"] is False


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"", 400),
        (b"not json", 400),
        (b'{"action": 3}', 400),
        (b'{"action": "explode"}', 400),
        (b'{"nothing": "here"}', 400),
        (b'{"action": "start", "ttl": "soon"}', 400),
        (b"[1, 2]", 400),
    ],
)
def test_bad_invocations_are_400(shim: Shim, body: bytes, status: int) -> None:
    got, reply = shim.request("POST", "/invocations", body)
    assert got == status and "error" in reply
    assert shim.request("GET", "/ping")[1]["status"] == "Healthy"  # state untouched


def test_malformed_http(shim: Shim) -> None:
    assert shim.raw(b"garbage\r\n\r\n").startswith(b"HTTP/1.1 400")
    assert shim.raw(b"POST /invocations HTTP/1.1\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 411")
    assert shim.raw(b"POST /invocations HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n"
                    ).startswith(b"HTTP/1.1 413")
    assert shim.raw(b"POST /invocations HTTP/1.1\r\nContent-Length: 50\r\n\r\n{\"a"
                    ).startswith(b"HTTP/1.1 400")
    assert shim.raw(b"GET /ping HTTP/1.1\r\n" + b"X: y\r\n" * 5000).startswith(b"HTTP/1.1 431")
    assert shim.raw(b"") == b""  # a client that hangs up at once
    assert shim.request("GET", "/nope")[0] == 404
    assert shim.request("GET", "/invocations")[0] == 405
    assert shim.request("POST", "/ping", b"{}")[0] == 405
    assert shim.request("GET", "/ping")[0] == 200  # still serving


def test_concurrent_requests_and_a_stalled_client(shim: Shim) -> None:
    stalled = socket.create_connection(("127.0.0.1", shim.port))
    stalled.sendall(b"GET /pi")  # never finishes its request
    try:
        def one(i: int) -> str:
            if i % 2:
                return shim.invoke({"action": "status"})[1]["status"]
            return shim.request("GET", "/ping")[1]["status"]

        started = time.monotonic()
        with ThreadPoolExecutor(32) as pool:
            results = list(pool.map(one, range(400)))
        assert set(results) == {"Healthy"}
        assert time.monotonic() - started < 10
    finally:
        stalled.close()


def test_port_from_environment(shim_binary: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([str(shim_binary)], stdout=subprocess.PIPE, text=True,
                            env={"ROLLHUB_SHIM_HOST": "127.0.0.1", "ROLLHUB_SHIM_PORT": str(port)})
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == f"listening on 127.0.0.1:{port}"
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0
    bad = subprocess.run([str(shim_binary), "--port", "nope"], capture_output=True, text=True)
    assert bad.returncode == 2 and "bad port" in bad.stderr
