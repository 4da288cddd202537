"""``InvokeAgentRuntimeCommand`` for the local data plane: run a command, answer an event stream.

The service runs ``body.command`` inside the session's container *without* a shell (the
caller sends ``/bin/sh -c '...'``) and answers ``application/vnd.amazon.eventstream``:
binary messages, each a prelude (total length, headers length, prelude CRC32), string
headers (``:message-type``, ``:event-type``, ``:content-type``), a JSON payload and a
message CRC32. botocore's model makes every event a ``chunk`` holding one of
``contentStart``, ``contentDelta`` (``stdout``/``stderr``) or ``contentStop``
(``exitCode``, ``status`` ``COMPLETED`` or ``TIMED_OUT``); failures are ``exception``
messages named after the model's error members (``validationException``, …).

Locally the "container" is this machine: commands run as the serving user, in
``workdir``, with a small fixed environment. That is why the data plane only runs them
when it was built with ``commands_dir`` (tests and single-user development machines).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shlex
import signal
import struct
import zlib
from pathlib import Path
from typing import Any

__all__ = ["EVENTSTREAM", "chunk_event", "encode_message", "exception_event", "run_command"]

log = logging.getLogger(__name__)

EVENTSTREAM = "application/vnd.amazon.eventstream"
#: characters of output per ``contentDelta`` event.
DELTA_CHARS = 16 * 1024
# The environment a command sees: the host's PATH and locale, nothing secret.
_ENV_KEYS = ("PATH", "LANG", "LC_ALL", "TZ")
_STRING = 7  # event-stream header value type: string


def encode_message(headers: dict[str, str], payload: bytes) -> bytes:
    """One event-stream message with string headers."""
    raw_headers = b""
    for name, value in headers.items():
        encoded = value.encode()
        raw_headers += bytes([len(name)]) + name.encode() + bytes([_STRING])
        raw_headers += struct.pack(">H", len(encoded)) + encoded
    total = 4 + 4 + 4 + len(raw_headers) + len(payload) + 4
    prelude = struct.pack(">II", total, len(raw_headers))
    head = prelude + struct.pack(">I", zlib.crc32(prelude)) + raw_headers + payload
    return head + struct.pack(">I", zlib.crc32(head))


def chunk_event(member: str, value: dict[str, Any]) -> bytes:
    """A ``chunk`` event holding ``{member: value}``."""
    headers = {
        ":message-type": "event",
        ":event-type": "chunk",
        ":content-type": "application/json",
    }
    return encode_message(headers, json.dumps({member: value}).encode())


def exception_event(member: str, message: str) -> bytes:
    """An in-stream service error (``member`` as the model names it: ``validationException``)."""
    headers = {
        ":message-type": "exception",
        ":exception-type": member,
        ":content-type": "application/json",
    }
    return encode_message(headers, json.dumps({"message": message}).encode())


async def run_command(body: object, workdir: Path) -> bytes:
    """Run ``body["command"]`` (no shell) in ``workdir``; return the whole event stream.

    :param body: the request's ``body`` structure: ``command`` and optional ``timeout`` (s).
    """
    if not isinstance(body, dict) or not isinstance(body.get("command"), str):
        return exception_event("validationException", "body.command must be a string")
    try:
        argv = shlex.split(body["command"])
    except ValueError as exc:
        return exception_event("validationException", f"body.command: {exc}")
    if not argv:
        return exception_event("validationException", "body.command is empty")
    timeout = body.get("timeout")
    env = {k: os.environ[k] for k in _ENV_KEYS if k in os.environ}
    env["HOME"] = str(workdir)
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=workdir,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # so a timeout kills the command's children too
        )
    except OSError as exc:
        return exception_event("validationException", f"cannot run {argv[0]!r}: {exc}")
    status = "COMPLETED"
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout=timeout)
    except TimeoutError:
        status = "TIMED_OUT"
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = await proc.communicate()
    frames = [chunk_event("contentStart", {})]
    for name, data in (("stdout", out), ("stderr", err)):
        text = data.decode(errors="replace")  # whole, so no character is cut in two
        for start in range(0, len(text), DELTA_CHARS):
            frames.append(chunk_event("contentDelta", {name: text[start : start + DELTA_CHARS]}))
    code = proc.returncode if proc.returncode is not None else -1
    frames.append(chunk_event("contentStop", {"exitCode": code, "status": status}))
    return b"".join(frames)
