"""The loopback callback server, poll schedules and backoff helpers (no workers)."""

from __future__ import annotations

import asyncio
import random

import httpx
import pytest
from rollhub.errors import SubmissionError
from rollhub.submission.callbacks import CallbackServer
from rollhub.submission.progress import RolloutProgress
from rollhub.submission.retry import Backoff, is_transient, poll_schedule


async def test_notice_reaches_the_handler_over_keep_alive() -> None:
    seen: list[dict] = []
    server = CallbackServer(seen.append)
    await server.start()
    try:
        async with httpx.AsyncClient() as http:
            for i in range(3):  # one connection, three requests
                r = await http.post(server.url, json={"session_id": f"s{i}", "status": "ok"})
                assert r.status_code == 204
        assert [n["session_id"] for n in seen] == ["s0", "s1", "s2"]
        assert server.received == 3
    finally:
        await server.close()


async def test_chunked_body_and_rejections() -> None:
    seen: list[dict] = []
    server = CallbackServer(seen.append)
    await server.start()
    try:
        async with httpx.AsyncClient() as http:

            async def chunks():
                yield b'{"session_id": '
                yield b'"chunked"}'

            assert (await http.post(server.url, content=chunks())).status_code == 204
            assert (await http.post(server.url, content=b"not json")).status_code == 400
            assert (await http.post(server.url, json={"status": "ok"})).status_code == 400
            assert (await http.get(server.url)).status_code == 405
            # Another client's token (or a stray request) resolves nothing.
            wrong = server.url.rsplit("/", 1)[0] + "/0000"
            assert (await http.post(wrong, json={"session_id": "x"})).status_code == 404
        assert [n["session_id"] for n in seen] == ["chunked"]
    finally:
        await server.close()


async def test_server_binds_loopback_and_closes() -> None:
    server = CallbackServer(lambda n: None)
    with pytest.raises(RuntimeError):
        server.url  # noqa: B018 - not started yet
    await server.start()
    url = server.url
    assert url.startswith("http://127.0.0.1:")
    await server.close()
    with pytest.raises(httpx.ConnectError):
        async with httpx.AsyncClient() as http:
            await http.post(url, json={"session_id": "s"})


def test_backoff_grows_caps_and_jitters() -> None:
    b = Backoff(initial=0.1, factor=2, maximum=1.0, jitter=0.5)
    assert [b.base(i) for i in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    rng = random.Random(0)
    delays = [b.delay(3, rng) for _ in range(200)]
    assert min(delays) >= 0.4 and max(delays) <= 0.8 and len(set(delays)) > 100
    assert Backoff(jitter=0).delay(1) == Backoff(jitter=0).base(1)
    assert b.base(10_000) == 1.0  # no overflow
    with pytest.raises(ValueError, match="jitter"):
        Backoff(jitter=2)


def test_poll_schedule_is_sparse_with_callbacks() -> None:
    assert poll_schedule(callbacks=True).base(0) >= 1.0
    assert poll_schedule(callbacks=False).base(0) <= 0.1
    assert poll_schedule(callbacks=False, initial_s=0.5).base(0) == 0.5


def test_transient_classification() -> None:
    assert is_transient(SubmissionError("x", transient=True))
    assert not is_transient(SubmissionError("x"))
    assert is_transient(ConnectionRefusedError())
    assert not is_transient(ValueError())


def test_progress_counts_and_draws() -> None:
    with RolloutProgress(3, enabled=True) as bar:
        bar.started(2)
        bar.finished("ok")
        bar.finished("agent_error")
        bar.finished("ok", resumed=True, was_running=False)
        assert (
            bar.summary()["done"] == 3 and bar.failed == 1 and bar.running == 0 and bar.resumed == 1
        )
    quiet = RolloutProgress(None, enabled=False)
    quiet.finished("ok", was_running=False)
    quiet.close()
    assert quiet.summary()["total"] is None


def test_builtin_runtimes_are_registered() -> None:
    from rollhub.plugins import build_host

    host = build_host()
    assert {"local", "agentcore", "ray"} <= set(host.registry.names("runtime"))


async def test_runtime_lost_listener_errors_do_not_hide_others() -> None:
    from rollhub.runtimes.local import LocalRuntime

    rt = LocalRuntime(app="x.py:app")
    got = []

    def broken(sid, reason):
        raise RuntimeError("listener bug")

    rt.on_session_lost(broken)
    rt.on_session_lost(lambda sid, reason: got.append(sid))
    rt._report_lost("s1", "test")
    rt.remove_session_lost(broken)
    rt.remove_session_lost(broken)  # absent: no error
    rt._report_lost("s2", "test")
    assert got == ["s1", "s2"]
    await asyncio.sleep(0)


async def test_loopback_http_refused_and_reuse() -> None:
    from rollhub.runtimes.local_http import LoopbackHTTP, LoopbackHTTPError

    seen: list[dict] = []
    server = CallbackServer(seen.append)
    await server.start()
    http = LoopbackHTTP()
    port = int(server.url.split(":")[2].split("/")[0])
    path = "/" + server.url.split("/", 3)[3]
    try:
        for i in range(3):
            r = await http.request("POST", port, path, body={"session_id": f"s{i}"})
            assert r.status_code == 204
        assert len(http._idle[port]) == 1  # one connection, reused
        r = await http.request("GET", port, "/elsewhere")
        assert r.status_code == 404 and r.text == "unknown path"
    finally:
        await server.close()
        await http.aclose()
    with pytest.raises(LoopbackHTTPError, match="cannot connect"):
        await LoopbackHTTP().request("GET", port, "/ping", timeout=2)
