"""Wrap any image with the sandbox health shim, so it can serve as an AgentCore sandbox.

AgentCore Runtime health-checks a container on port 8080; a task image (a repository
checkout with its test runner) has nothing listening there. The sandbox's health shim
(``shim.c`` of ``rollhub-sandbox``, a dependency-free C program) answers ``GET /ping`` and
the ``start``/``stop``/``status`` actions on ``POST /invocations``, and commands then arrive
through ``InvokeAgentRuntimeCommand``. The generated build context is a multi-stage build:
the shim is compiled statically on Alpine and copied into the task image, whose own user,
working directory and files stay as they are.
"""

from __future__ import annotations

import importlib.util
import logging
import re
import shutil
from pathlib import Path

from rollhub.errors import ConfigError, UsageError

__all__ = ["SHIM_PATH", "find_shim_source", "render_sandbox_dockerfile", "write_sandbox_context"]

log = logging.getLogger(__name__)

#: where the shim lives inside the wrapped image.
SHIM_PATH = "/usr/local/bin/rollhub-shim"
_IMAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@-]*$")


def find_shim_source(explicit: str | Path | None = None) -> Path:
    """The shim's C source: ``explicit``, else the copy beside the installed ``rollhub_sandbox``.

    :raises UsageError: no source found; the message says how to point at one.
    """
    if explicit is not None:
        path = Path(explicit)
        if not path.is_file():
            raise UsageError(f"--shim-source {str(path)!r} does not exist")
        return path
    candidates: list[Path] = []
    spec = importlib.util.find_spec("rollhub_sandbox")
    if spec is not None and spec.origin:
        pkg = Path(spec.origin).parent
        # shipped inside the package, or (a source checkout) in sandbox/shim beside it
        candidates += [pkg / "shim" / "shim.c", pkg.parent / "shim" / "shim.c"]
    for path in candidates:
        if path.is_file():
            return path
    raise UsageError(
        "the sandbox health shim's source (shim.c) was not found: install rollhub-sandbox "
        "from a source checkout or pass --shim-source path/to/sandbox/shim/shim.c"
    )


def render_sandbox_dockerfile(base_image: str) -> str:
    """The Dockerfile that adds the shim to ``base_image`` and makes it the entrypoint."""
    if not _IMAGE.fullmatch(base_image) or base_image.startswith("-"):
        raise ConfigError(f"--base-image {base_image!r} is not an image reference")
    return f"""\
# syntax=docker/dockerfile:1
# Written by `rollhub deploy sandbox`: {base_image} plus the rollhub health shim, so it
# can run as an AgentCore Runtime sandbox (linux/arm64, health checks on port 8080).
# On an amd64 host both stages build under emulation (QEMU, e.g. via tonistiigi/binfmt).
# The image needs /bin/sh, base64 and tar for the sandbox's file transfer.

# 1. The shim, compiled statically on Alpine (musl): it runs in any Linux image.
FROM --platform=linux/arm64 alpine:3.20 AS rollhub-shim
RUN apk add --no-cache build-base
COPY shim.c /src/shim.c
RUN cc -static -O2 -o /rollhub-shim /src/shim.c -lpthread

# 2. The task image as it is (its user, working directory and files), plus the shim.
FROM --platform=linux/arm64 {base_image}
COPY --from=rollhub-shim /rollhub-shim {SHIM_PATH}
EXPOSE 8080
# The shim is the container's main process; commands run beside it.
ENTRYPOINT ["{SHIM_PATH}", "--host", "0.0.0.0", "--port", "8080"]
CMD []
"""


def write_sandbox_context(directory: str | Path, base_image: str, shim_source: Path) -> Path:
    """Write the build context (``Dockerfile`` + ``shim.c``) into ``directory``.

    :returns: the Dockerfile's path.
    """
    ctx = Path(directory)
    ctx.mkdir(parents=True, exist_ok=True)
    dockerfile = ctx / "Dockerfile"
    dockerfile.write_text(render_sandbox_dockerfile(base_image), encoding="utf-8")
    shutil.copyfile(shim_source, ctx / "shim.c")
    log.debug("sandbox build context for %s in %s", base_image, ctx)
    return dockerfile
