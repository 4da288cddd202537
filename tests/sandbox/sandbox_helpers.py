"""Shared helpers of the sandbox tests (a plain module: tests/ is not a package)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from rollhub_sandbox.isolation import bwrap_status

SHIM_SRC = Path(__file__).resolve().parents[2] / "sandbox" / "shim" / "shim.c"
CC = shutil.which("cc") or shutil.which("gcc")


def build_shim(out: Path) -> tuple[Path, bool]:
    """Compile the health shim to ``out``; ``(path, static)``: static unless libc.a is missing."""
    assert CC is not None, "no C compiler"
    base = [CC, "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(out), str(SHIM_SRC), "-lpthread"]
    static = subprocess.run([base[0], "-static", *base[1:]], capture_output=True, text=True)
    if static.returncode == 0:
        return out, True
    dynamic = subprocess.run(base, capture_output=True, text=True)
    assert dynamic.returncode == 0, dynamic.stderr
    return out, False


def start_shim(binary: Path) -> tuple[subprocess.Popen[str], int]:
    """Run the shim on 127.0.0.1 with a free port; returns the process and the port."""
    proc = subprocess.Popen([str(binary), "--host", "127.0.0.1", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("listening on 127.0.0.1:"), line
    return proc, int(line.rsplit(":", 1)[1])

#: Commands whose quoting breaks naive wrappers: quotes, expansions, newlines, unicode.
NASTY = [
    "echo \"double \\\"quoted\\\"\" 'single' it'\\''s",
    "echo $HOME ${UNSET:-dflt} $((1+2))",
    "echo `echo backtick` $(echo subshell)",
    "printf 'line1\\nline2\\n'; echo 'real\nnewline'",
    "echo 'ünïcødé ✓ 日本語' \"emoji 🎉\"",
    "echo '\\'' ; echo \"'\\''\"",
    "a=1; b='x y'; echo \"$a|$b|\"; false || echo fallback",
    "cat <<'EOF'\n$NOT_EXPANDED `nope`\nEOF",
    "echo '; rm -rf /' && echo '&& || | > <'",
    "for i in 1 2 3; do printf '%s,' \"$i\"; done; echo",
]


def direct(command: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``command`` with ``/bin/sh -c`` directly: the reference behaviour."""
    raw = subprocess.run(["/bin/sh", "-c", command], capture_output=True,
                         env={"PATH": "/usr/bin:/bin", "HOME": "/home/x", **(env or {})},
                         check=False)
    # Decoded by hand: text=True would translate "\r" into "\n".
    return subprocess.CompletedProcess(raw.args, raw.returncode, raw.stdout.decode(),
                                       raw.stderr.decode())


def pid_gone(pid: int) -> bool:
    """True when ``pid`` no longer runs (gone, or a zombie waiting for its parent)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def run_as_nobody(code: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run Python ``code`` as uid/gid 65534 (needs root and setpriv), in a world-writable
    temp dir passed as ``sys.argv[1]``: permission checks only bind an unprivileged user."""
    work = tempfile.mkdtemp(prefix="rollhub-nobody-", dir="/tmp")
    os.chmod(work, 0o777)
    try:
        return subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                               sys.executable, "-c", code, work],
                              capture_output=True, text=True, timeout=timeout, cwd=work)
    finally:
        subprocess.run(["rm", "-rf", work], check=False)


def _nobody_skip() -> str | None:
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        return "needs root and setpriv to run as an unprivileged user"
    # the unprivileged user imports rollhub from this checkout (an editable install)
    checkout = Path(__file__).resolve().parents[2]
    for folder in (checkout, *checkout.parents):
        if not os.stat(folder).st_mode & 0o001:
            return (f"an unprivileged user cannot reach this checkout: {folder} is not "
                    f"searchable by others (chmod o+x {folder}, or clone elsewhere)")
    return None


#: why a test that needs run_as_nobody is skipped, or None when it can run
NOBODY_SKIP = _nobody_skip()

BWRAP, BWRAP_REASON = bwrap_status()
#: a test that asks for isolation="bwrap" (without bubblewrap it skips and says why)
needs_bwrap = pytest.mark.skipif(not BWRAP, reason=f"bubblewrap unusable here: {BWRAP_REASON}")
