"""One worker process of the ``local`` runtime: what the runtime knows of it, how it stops."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from dataclasses import dataclass, field
from typing import Any

__all__ = ["WorkerProcess"]


@dataclass
class WorkerProcess:
    """A worker serving the app on ``127.0.0.1:port``."""

    index: int
    proc: asyncio.subprocess.Process
    port: int
    #: session id -> accepted time (None while its POST is in flight)
    sessions: dict[str, float | None] = field(default_factory=dict)
    alive: bool = True
    failures: int = 0
    lists_rollouts: bool = True
    stderr: deque[str] = field(default_factory=lambda: deque(maxlen=50))
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)

    @property
    def base(self) -> str:
        """The worker's base URL."""
        return f"http://127.0.0.1:{self.port}"

    async def stop(self) -> None:
        """Terminate the process (kill it after 5 s) and cancel its output drains."""
        self.alive = False
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 5.0)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
                await self.proc.wait()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
