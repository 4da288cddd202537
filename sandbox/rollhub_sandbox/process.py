"""Run one command as a child process group, capture capped output, kill the whole tree.

The child starts in a new session (``start_new_session=True``), so its process group holds
everything it forks. Processes that leave the group (``setsid``, daemons) are still found:
every process of a sandbox inherits a tag in its environment (``ROLLHUB_SANDBOX_EXEC`` per
command, ``ROLLHUB_SANDBOX_ID`` per sandbox), and :func:`find_tagged` scans ``/proc`` for it.
A process that clears its own environment *and* leaves the group escapes this; the docs say
so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from typing import IO

from rollhub_sandbox.result import ExecResult, OutputBuffer

log = logging.getLogger(__name__)

__all__ = ["find_tagged", "kill_tagged", "run_process"]

#: After the main process exits, how long leftover processes may hold stdout/stderr open
#: before they are killed so the command can return.
DRAIN_GRACE_S = 0.5


def find_tagged(tag: str) -> list[int]:
    """Pids whose environment contains the exact ``NAME=value`` entry ``tag`` (Linux)."""
    needle = tag.encode()
    me = os.getpid()
    pids: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return pids
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                environ = fh.read()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            pids.append(int(entry))
    return pids


def kill_tagged(tag: str, sig: int = signal.SIGKILL) -> list[int]:
    """Send ``sig`` to every process carrying ``tag``; return their pids."""
    pids = find_tagged(tag)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
    return pids


def _signal_tree(pgid: int, tag: str, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
    kill_tagged(tag, sig)


async def run_process(
    argv: Sequence[str],
    *,
    env: dict[str, str],
    tag: str,
    cwd: str | None = None,
    stdin: bytes | None = None,
    timeout: float | None = None,
    max_output: int,
    kill_grace: float = 2.0,
) -> ExecResult:
    """Run ``argv`` and return its :class:`ExecResult`; only spawning itself can raise.

    :param env: the complete environment; ``tag`` (``NAME=value``) is added to it.
    :param tag: identifies every process of this command for the kill at the end.
    :param timeout: at the deadline the group and tagged processes get SIGTERM, then
        SIGKILL after ``kill_grace`` seconds (those that ignore SIGTERM die too).
    :raises OSError: the program could not be started.
    """
    name, _, value = tag.partition("=")
    loop = asyncio.get_running_loop()
    started = time.monotonic()
    # Popen + a pidfd rather than asyncio's subprocess: its wait() may also wait for the
    # pipes to close (Python >= 3.12), which a background job can hold open forever.
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env={**env, name: value},
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    pgid = proc.pid
    out, err = OutputBuffer(max_output), OutputBuffer(max_output)
    exited = _exit_future(loop, proc)

    async def wait_exit() -> None:
        await asyncio.shield(exited)

    async def pump(pipe: IO[bytes] | None, buf: OutputBuffer) -> None:
        reader = asyncio.StreamReader(limit=1 << 16)
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), pipe
        )
        try:
            while chunk := await reader.read(65536):
                buf.feed(chunk)
        finally:
            transport.close()

    async def feed_stdin() -> None:
        assert proc.stdin is not None and stdin is not None
        transport, _ = await loop.connect_write_pipe(asyncio.Protocol, proc.stdin)
        # close() flushes what the child reads and gives up at EPIPE; it never blocks us.
        transport.write(stdin)
        transport.close()

    pumps = [asyncio.ensure_future(pump(proc.stdout, out)),
             asyncio.ensure_future(pump(proc.stderr, err))]
    feeder = asyncio.ensure_future(feed_stdin()) if stdin is not None else None
    timed_out = False
    try:
        try:
            await asyncio.wait_for(wait_exit(), timeout)
        except TimeoutError:
            timed_out = True
            _signal_tree(pgid, tag, signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wait_exit(), kill_grace)
            # Whatever ignored SIGTERM (the main process or any descendant) dies now.
            _signal_tree(pgid, tag, signal.SIGKILL)
            await wait_exit()
        _done, pending = await asyncio.wait(pumps, timeout=DRAIN_GRACE_S)
        if pending:
            # Background jobs still hold the pipes: the command is over, they go.
            log.debug("command left processes holding its output open; killing them")
            _signal_tree(pgid, tag, signal.SIGKILL)
            await asyncio.wait(pumps, timeout=5.0)
    except BaseException:
        _signal_tree(pgid, tag, signal.SIGKILL)
        raise
    finally:
        unfinished = [t for t in [*pumps, feeder] if t is not None and not t.done()]
        for task in unfinished:
            task.cancel()
        if unfinished:
            # Let each pump close its own transport (and drop its reader) before the pipe
            # fds are closed below: a closed fd number may be reused by another command.
            await asyncio.gather(*unfinished, return_exceptions=True)
        if not exited.done():
            exited.cancel()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=0.1 if proc.returncode is None else None)
    rc = proc.returncode if proc.returncode is not None else -signal.SIGKILL
    return ExecResult(
        exit_code=rc,
        stdout=out.text(),
        stderr=err.text(),
        timed_out=timed_out,
        duration=time.monotonic() - started,
        stdout_truncated=out.truncated,
        stderr_truncated=err.truncated,
    )


def _exit_future(loop: asyncio.AbstractEventLoop, proc: subprocess.Popen[bytes]) -> asyncio.Future[int]:
    """A future that resolves with the exit status once ``proc`` has exited (and is reaped)."""
    fut: asyncio.Future[int] = loop.create_future()

    def check() -> bool:
        if fut.done():
            return True
        rc = proc.poll()
        if rc is None:
            return False
        fut.set_result(rc)
        return True

    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        pidfd = None
    if pidfd is not None:
        fd: int = pidfd
        closed = False

        def release() -> None:
            # Exactly once: after os.close the number may belong to another reader.
            nonlocal closed
            if not closed:
                closed = True
                loop.remove_reader(fd)
                os.close(fd)

        def on_ready() -> None:
            if check():
                release()

        loop.add_reader(fd, on_ready)
        fut.add_done_callback(lambda _f: release())
    else:  # no pidfd (old kernel): poll
        async def poll() -> None:
            while not check():
                await asyncio.sleep(0.02)

        task = loop.create_task(poll())
        fut.add_done_callback(lambda _f: task.cancel())
    return fut

