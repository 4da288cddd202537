"""rollhub-sandbox: run shell commands in isolated environments; outcomes become rewards.

Failing commands and timeouts are results (:class:`ExecResult`), not exceptions; the typed
errors here (:class:`SandboxError` and below) are for the machinery around them.
"""

from rollhub_sandbox.client import AsyncSandbox, AsyncSandboxClient, Sandbox, SandboxClient
from rollhub_sandbox.errors import (
    SandboxArgumentError,
    SandboxError,
    SandboxFileError,
    SandboxNotFound,
    SandboxPathError,
    SandboxProviderError,
    SandboxStartError,
)
from rollhub_sandbox.provider import ProviderOptions, ProviderSandbox, SandboxProvider
from rollhub_sandbox.result import ExecResult

__version__ = "0.1.0"

__all__ = [
    "AsyncSandbox",
    "AsyncSandboxClient",
    "ExecResult",
    "ProviderOptions",
    "ProviderSandbox",
    "Sandbox",
    "SandboxArgumentError",
    "SandboxClient",
    "SandboxError",
    "SandboxFileError",
    "SandboxNotFound",
    "SandboxPathError",
    "SandboxProvider",
    "SandboxProviderError",
    "SandboxStartError",
]
