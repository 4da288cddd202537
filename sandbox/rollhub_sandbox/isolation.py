"""Optional isolation for the local provider with bubblewrap (``bwrap``).

With ``isolation = "bwrap"`` each command runs in new user, mount, pid, ipc, uts, cgroup and
network namespaces. It sees a read-only ``/usr`` (and the ``/bin``, ``/lib*`` links), a small
read-only part of ``/etc``, private ``/proc``, ``/dev`` and ``/tmp``, the paths named in
``ro_binds``, and its workspace at ``/workspace``; nothing else of the host file system, and
no network unless ``network = true``.

Whether bwrap works is a property of the machine (the binary, user namespaces); it is
checked once per process and the reason is kept, so ``isolation = "auto"`` can fall back to
plain processes and say why.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
from collections.abc import Sequence

log = logging.getLogger(__name__)

__all__ = ["SANDBOX_WORKDIR", "bwrap_argv", "bwrap_status"]

#: Where the workspace appears inside an isolated sandbox.
SANDBOX_WORKDIR = "/workspace"

_SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC_FILES = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/localtime",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/hosts",
)


@functools.cache
def bwrap_status() -> tuple[bool, str]:
    """``(usable, reason)``: whether bwrap can create namespaces on this machine."""
    exe = shutil.which("bwrap")
    if exe is None:
        return False, "bwrap is not installed (apt-get install bubblewrap / dnf install bubblewrap)"
    try:
        proc = subprocess.run(
            [exe, "--unshare-all", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
             "true"],
            capture_output=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"bwrap could not run: {exc}"
    if proc.returncode != 0:
        detail = proc.stderr.decode(errors="replace").strip()
        return False, f"bwrap cannot create namespaces here (user namespaces disabled?): {detail}"
    return True, f"bwrap at {exe}"


def bwrap_argv(
    workspace: str,
    *,
    ro_binds: Sequence[str] = (),
    network: bool = False,
) -> list[str]:
    """The bwrap prefix that isolates one command with ``workspace`` at /workspace."""
    exe = shutil.which("bwrap") or "bwrap"
    argv = [exe, "--unshare-all", "--die-with-parent", "--hostname", "sandbox"]
    if network:
        argv.append("--share-net")
    argv += ["--ro-bind", "/usr", "/usr"]
    for path in _SYSTEM_DIRS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    for path in _ETC_FILES:
        if os.path.exists(path):
            argv += ["--ro-bind", path, path]
    if network and os.path.exists("/etc/resolv.conf"):
        argv += ["--ro-bind", "/etc/resolv.conf", "/etc/resolv.conf"]
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    for path in ro_binds:
        real = os.path.realpath(path)
        argv += ["--ro-bind", real, real]
        if real != os.path.abspath(path):
            argv += ["--ro-bind", real, os.path.abspath(path)]
    argv += ["--bind", workspace, SANDBOX_WORKDIR, "--chdir", SANDBOX_WORKDIR]
    return argv
