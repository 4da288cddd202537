"""Typed errors of rollhub-sandbox.

A command that fails, prints to stderr or runs past its timeout is a *result*
(:class:`~rollhub_sandbox.result.ExecResult`), never one of these exceptions: in RL those
outcomes are the reward signal. These errors are for the machinery around the command.

The tree (under :class:`rollhub.errors.RollhubError`)::

    SandboxError
    ├── SandboxArgumentError (+ValueError)   bad input: env name, timeout, path, sandbox id
    │   └── SandboxPathError                 a path escapes the sandbox's workspace
    ├── SandboxNotFound (+LookupError)       attach/use of an unknown, expired or destroyed id
    ├── SandboxFileError (+OSError)          read_file/write_file/upload failed in the sandbox
    ├── SandboxStartError                    the provider could not create the sandbox
    └── SandboxProviderError                 the backend failed (AWS, Docker CLI, process spawn)

``SandboxProviderError.transient`` says whether a retry may succeed (throttling, 5xx).
All errors keep their context in keyword attributes and pickle across processes.
"""

from __future__ import annotations

from rollhub.errors import RollhubError

__all__ = [
    "SandboxArgumentError",
    "SandboxError",
    "SandboxFileError",
    "SandboxNotFound",
    "SandboxPathError",
    "SandboxProviderError",
    "SandboxStartError",
]


class SandboxError(RollhubError):
    """Base class of the sandbox machinery's errors."""


class SandboxArgumentError(SandboxError, ValueError):
    """An argument is invalid; the message names it, the bad value and the fix."""


class SandboxPathError(SandboxArgumentError):
    """A path points outside the sandbox's workspace. Context: ``path``, ``workspace``."""


class SandboxNotFound(SandboxError, LookupError):
    """No live sandbox has this id (never created, expired and reaped, or destroyed)."""


class SandboxFileError(SandboxError, OSError):
    """A file operation failed inside the sandbox (missing file, permissions, a directory)."""


class SandboxStartError(SandboxError):
    """The provider could not create a sandbox (bad template/image, isolation unavailable)."""


class SandboxProviderError(SandboxError):
    """The backend failed: an AWS call, the Docker CLI, spawning a process."""

    def __init__(self, message: str = "", *, transient: bool = False, **context: object) -> None:
        super().__init__(message, transient=transient, **context)


for _cls in (
    SandboxError,
    SandboxArgumentError,
    SandboxPathError,
    SandboxNotFound,
    SandboxFileError,
    SandboxStartError,
    SandboxProviderError,
):
    _cls.__module__ = "rollhub_sandbox"
