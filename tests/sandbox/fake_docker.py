#!/usr/bin/env python3
"""A stand-in for the Docker CLI, for machines without a Docker engine.

It implements the handful of subcommands and flags the docker provider uses, with the
CLI's documented argument shapes and output formats, and runs "containers" as plain
processes on the host (their file system is the host's, so tests give the provider a
temporary ``workdir``). State lives in ``$FAKE_DOCKER_STATE`` (a JSON file per container).
It checks the provider's argv; it cannot stand in for Docker's isolation.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import tarfile
from pathlib import Path

STATE = Path(os.environ["FAKE_DOCKER_STATE"])


def _load(name: str) -> dict:
    path = STATE / f"{name}.json"
    if not path.exists():
        sys.stderr.write(f"Error response from daemon: No such container: {name}\n")
        sys.exit(1)
    return json.loads(path.read_text())


def main(argv: list[str]) -> None:
    cmd, args = argv[0], argv[1:]
    if cmd == "run":
        labels, name = {}, None
        i = 0
        while args[i].startswith("-"):
            flag = args[i]
            if flag in ("-d", "--init"):
                i += 1
                continue
            value = args[i + 1]
            if flag == "--name":
                name = value
            elif flag == "--label":
                k, _, v = value.partition("=")
                labels[k] = v
            i += 2
        image, script = args[i], args[i + 2]
        assert args[i + 1] == "-c", args
        os.system(script.replace("exec tail -f /dev/null", "true"))  # the mkdir part
        STATE.mkdir(parents=True, exist_ok=True)
        (STATE / f"{name}.json").write_text(json.dumps({"image": image, "labels": labels}))
        print(name)
    elif cmd == "exec":
        env = dict(os.environ)
        i = 0
        while args[i].startswith("-"):
            if args[i] == "-i":
                i += 1
            elif args[i] == "-e":
                k, _, v = args[i + 1].partition("=")
                env[k] = v
                i += 2
        _load(args[i])
        os.execvpe(args[i + 1], args[i + 1 :], env)
    elif cmd == "cp":
        src, dst = args
        if dst == "-":
            name, _, path = src.partition(":")
            _load(name)
            if not os.path.exists(path):
                sys.stderr.write(f"Error: Could not find the file {path} in container {name}\n")
                sys.exit(1)
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w") as tar:
                tar.add(path, arcname=os.path.basename(path))
            sys.stdout.buffer.write(buf.getvalue())
        else:
            name, _, path = dst.partition(":")
            _load(name)
            shutil.copytree(src.rstrip("/.") or src, path, dirs_exist_ok=True)
    elif cmd == "inspect":
        assert args[0] == "-f", args
        fmt, rc = args[1], 0
        for name in args[2:]:
            path = STATE / f"{name}.json"
            if not path.exists():  # Docker prints the others and fails at the end
                sys.stderr.write(f"Error: No such object: {name}\n")
                rc = 1
                continue
            expires = json.loads(path.read_text())["labels"].get(
                "io.rollhub.sandbox.expires_at", ""
            )
            # the two templates the provider uses: {{.State.Running}} … and {{.Name}} …
            print("/" + name if fmt.startswith("{{.Name}}") else "true", expires)
        sys.exit(rc)
    elif cmd == "rm":
        for name in [a for a in args if not a.startswith("-")]:
            (STATE / f"{name}.json").unlink(missing_ok=True)
    elif cmd == "ps":
        assert args[-2:] == ["--format", "{{.Names}}"], args
        for path in sorted(STATE.glob("*.json")):
            print(path.stem)
    else:
        sys.stderr.write(f"fake docker: unsupported command {cmd}\n")
        sys.exit(125)


if __name__ == "__main__":
    main(sys.argv[1:])
