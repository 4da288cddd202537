#!/usr/bin/env python3
"""A stand-in for a container CLI (docker, finch, podman) on machines without an engine.

It accepts the commands ``rollhub deploy`` runs, with the argument shapes of the real CLIs
(``build --platform P -t IMAGE -f FILE CONTEXT``, ``login --username U --password-stdin
REGISTRY``, ``push IMAGE``), and appends each call to ``$FAKE_TOOL_LOG`` as one JSON line:
the argv, and for ``login`` what arrived on standard input. ``$FAKE_TOOL_FAIL`` makes one
command fail like the real CLI: ``push=denied: User is not authorized`` prints that line on
stderr and exits 1. It checks argv; it cannot build or push anything.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    cmd = argv[0] if argv else ""
    record: dict = {"tool": Path(sys.argv[0]).name, "argv": argv}
    if cmd == "login":
        assert "--password-stdin" in argv, argv
        record["stdin"] = sys.stdin.read()
    elif cmd == "build":
        i = argv.index("-f")
        dockerfile, context = argv[i + 1], argv[-1]
        if not Path(dockerfile).is_file() or not Path(context).is_dir():
            sys.stderr.write(f"ERROR: failed to read dockerfile {dockerfile}\n")
            return 1
        record["dockerfile"] = Path(dockerfile).read_text()
        record["context_files"] = sorted(p.name for p in Path(context).iterdir())
        wheels = Path(context) / "wheels"
        if wheels.is_dir():
            record["wheels"] = sorted(p.name for p in wheels.iterdir())
    elif cmd != "push":
        sys.stderr.write(f"fake tool: unsupported command {cmd}\n")
        return 125
    with open(os.environ["FAKE_TOOL_LOG"], "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")
    failing, _, message = os.environ.get("FAKE_TOOL_FAIL", "").partition("=")
    if failing == cmd:
        sys.stderr.write(message + "\n")
        return 1
    if cmd == "login":
        print("Login Succeeded")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
