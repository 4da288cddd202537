"""Free loopback ports for the servers a test helper starts as processes of their own."""

from __future__ import annotations

import contextlib
import socket

__all__ = ["free_ports"]


def free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports.

    Every probe socket stays bound until all are chosen: a port probed and released can be
    the kernel's next pick. A server may still lose one to another process before it binds
    it, so a helper that hands them out starts the server again on fresh ones.
    """
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]
