"""A session's container must be the server its transport talks to.

On the host network each container serves on a port the transport probed. Two sessions
starting together could be handed the same port (a port probed and released can be the
kernel's next pick), or something else could bind it first; the container that loses then
fails, and its ``/ping`` was answered by the other's server: the session would have run
on another session's agent. Ports are reserved for the process's live containers, and
``/ping`` says which container answered.
"""

from __future__ import annotations

import httpx
import pytest
from rollhub.a2a import transports
from rollhub.a2a.server import a2a_app
from rollhub.a2a.transports import ContainerTransport
from rollhub.a2a.wire import INSTANCE_ENV, INSTANCE_HEADER
from rollhub.errors import SessionError
from rollhub.testing.servers import serve_app

from tests.core.a2a.agents import math_app


def _transport(name: str) -> ContainerTransport:
    return ContainerTransport(name=name, image="unused", app="agent:app")


async def _ping_check(transport: ContainerTransport, url: str) -> None:
    transport.http = httpx.AsyncClient()
    try:
        await transport._wait_ping(url)
    finally:
        await transport.stop()


async def test_a_ping_answered_by_another_sessions_server_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv(INSTANCE_ENV, "rollhub-session-b")
    with serve_app(a2a_app(math_app(tmp_path))) as url:
        assert httpx.get(f"{url}/ping").headers[INSTANCE_HEADER] == "rollhub-session-b"
        with pytest.raises(SessionError, match=r"served by rollhub-session-b") as err:
            await _ping_check(_transport("rollhub-session-a"), url)
        assert err.value.transient
        await _ping_check(_transport("rollhub-session-b"), url)  # its own: fine


async def test_a_server_that_does_not_say_which_it_is_is_taken_at_its_word(
    tmp_path, monkeypatch
):
    # an image built by an older rollhub: its /ping names no instance
    monkeypatch.delenv(INSTANCE_ENV, raising=False)
    with serve_app(a2a_app(math_app(tmp_path))) as url:
        assert INSTANCE_HEADER not in httpx.get(f"{url}/ping").headers
        await _ping_check(_transport("rollhub-session-a"), url)


def test_a_port_is_not_handed_to_two_live_containers(monkeypatch):
    picks = iter([41001, 41001, 41002, 41001, 41003])

    class Probe:  # the kernel handing back the port it just released
        def __enter__(self) -> Probe:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def bind(self, address: tuple[str, int]) -> None:
            self.port = next(picks)

        def getsockname(self) -> tuple[str, int]:
            return ("127.0.0.1", self.port)

    monkeypatch.setattr(transports.socket, "socket", lambda *a: Probe())
    monkeypatch.setattr(transports, "_RESERVED", set())
    first, second = transports._reserve_port(), transports._reserve_port()
    assert (first, second) == (41001, 41002)
    transports._RESERVED.discard(first)  # its container stopped
    assert transports._reserve_port() == 41001
