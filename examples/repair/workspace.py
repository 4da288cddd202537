"""One episode's sandbox: created from a task, acted on by the agent's shell tool, scored by
the task's check, then destroyed. Both agents (Strands and LangGraph) use it.

Which sandbox: ``REPAIR_SANDBOX_PROVIDER`` names a ``rollhub-sandbox`` provider (default
``local``: a workspace directory, isolated with bubblewrap where it is usable);
``REPAIR_SANDBOX_OPTIONS`` holds that provider's options as JSON, and
``REPAIR_SANDBOX_IMAGE`` the image to start (``docker``: the image built from this folder's
``Dockerfile``, under Docker or podman). A training config sets them for its workers in
``[runtime] env``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from rollhub_sandbox import Sandbox, SandboxClient
from tasks import Task, check_command, format_result

log = logging.getLogger("examples.repair.workspace")

__all__ = ["Workspace", "open_workspace"]

#: seconds one shell command may run
COMMAND_TIMEOUT = 10.0
#: seconds a sandbox may live if its episode never closes it (a killed worker)
SANDBOX_TTL = 900.0


@dataclass
class Workspace:
    """The sandbox of one episode and what happened in it."""

    sandbox: Sandbox
    task: Task
    commands: list[dict[str, Any]] = field(default_factory=list)

    def shell(self, command: str) -> str:
        """Run one command for the agent; a failing command or a timeout is a result."""
        result = self.sandbox.exec(command, timeout=COMMAND_TIMEOUT)
        output = result.stdout + result.stderr
        if result.timed_out:
            output += f"\n(timed out after {COMMAND_TIMEOUT:.0f} s)"
        self.commands.append({"command": command, "exit_code": result.exit_code})
        return format_result(result.exit_code, output)

    def score(self) -> dict[str, Any]:
        """Run the task's check after the agent stopped: reward 1.0 when it exits 0."""
        result = self.sandbox.exec(check_command(self.task), timeout=COMMAND_TIMEOUT)
        return {
            "rewards": 1.0 if result.exit_code == 0 and not result.timed_out else 0.0,
            "check": {
                "exit_code": result.exit_code,
                "output": (result.stdout + result.stderr).strip(),
            },
        }


@functools.cache
def _client() -> SandboxClient:
    """One client per worker process (its event-loop thread serves every episode)."""
    provider = os.environ.get("REPAIR_SANDBOX_PROVIDER", "local")
    options: dict[str, Any] = json.loads(os.environ.get("REPAIR_SANDBOX_OPTIONS") or "{}")
    if provider == "local":
        options.setdefault("isolation", "auto")
    return SandboxClient(provider, **options)


@contextlib.contextmanager
def open_workspace(task: Task) -> Iterator[Workspace]:
    """A fresh sandbox holding the task's files, destroyed when the block ends."""
    with _client().start(os.environ.get("REPAIR_SANDBOX_IMAGE"), ttl=SANDBOX_TTL) as sandbox:
        for path, content in task.files.items():
            sandbox.write_file(path, content)
        log.debug("task %s/%s laid into %s", task.seed, task.depth, sandbox.id)
        yield Workspace(sandbox, task)
