"""Shared helpers of the sandbox tests (a plain module: tests/ is not a package)."""

from __future__ import annotations

import subprocess

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
