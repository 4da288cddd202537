"""The Dockerfile ``rollhub deploy init`` writes for an agent built on ``RolloutApp``.

The image follows AgentCore Runtime's contract: a ``linux/arm64`` container serving
``POST /invocations`` and ``GET /ping`` on port 8080. Dependencies come from the agent
project's own files, in the first form found:

=================  ============================================================
``uv.lock``        ``uv sync --frozen --no-dev`` (the lock, exactly)
``poetry.lock``    ``poetry install --only main`` (the lock, exactly)
``requirements*``  ``pip install -r`` the pinned list, then the project itself
``pyproject.toml``  ``pip install .`` (ranges resolved at build time)
=================  ============================================================

rollhub is not on the public package index: with a requirements file or a bare
``pyproject.toml`` the image installs rollhub's wheels from ``./wheels`` in the build
context (:mod:`rollhub.deploy.wheels` puts them there). With a lock, the lock decides.

The base image and the platform are build arguments (``BASE_IMAGE``, ``PLATFORM``; defaults
``python:3.X-slim`` and ``linux/arm64``), so the same file builds a native image for a local
test or starts from a base image kept in a private registry.

Nothing secret goes into the image: no ``ENV``/``ARG`` with credentials, and the
``.dockerignore`` written beside it keeps ``.env`` files, keys and AWS config out of the
build context. Credentials reach the agent at run time: the model API key travels in each
request's ``_rollout`` config, AWS access comes from the runtime's execution role.
"""

from __future__ import annotations

import logging
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from rollhub.deploy.wheels import CONSTRAINTS, WHEELS_DIR
from rollhub.errors import ConfigError

__all__ = [
    "DEFAULT_PYTHON",
    "DOCKERIGNORE",
    "AgentProject",
    "inspect_project",
    "render_agent_dockerfile",
]

log = logging.getLogger(__name__)

DEFAULT_PYTHON = "3.12"
PORT = 8080
#: uid of the image's unprivileged user (not 0, outside the range distributions hand out).
APP_UID = 10001

REQUIREMENTS_FILES = ("requirements.lock", "requirements.txt")
#: pip's options that install rollhub from the bundled wheels, at their bundled versions.
FIND_LINKS = f"--find-links ./{WHEELS_DIR} -c ./{WHEELS_DIR}/{CONSTRAINTS}"

#: build-context exclusions: secrets first, then what only bloats the image.
DOCKERIGNORE = """\
# Written by `rollhub deploy init`. Keeps secrets and local state out of the build context.
.env
.env.*
*.pem
*.key
.aws/
.ssh/
.netrc
.pypirc
.git/
.venv/
venv/
__pycache__/
*.pyc
.pytest_cache/
.mypy_cache/
.ruff_cache/
runs/
dist/
build/
"""

AMD64_NOTE = """\
# AgentCore Runtime runs linux/arm64 containers, so this image is built for that platform.
# On an arm64 machine (Apple silicon, Graviton) the build is native. On an amd64 host the
# build runs under emulation: register QEMU once, then build for arm64, e.g.
#   docker run --privileged --rm tonistiigi/binfmt --install arm64
#   docker buildx build --platform linux/arm64 -t IMAGE --load .
# (`rollhub deploy agentcore` passes --platform linux/arm64 to docker, finch or podman.)
# A native image for a local test: --build-arg PLATFORM=linux/amd64 (and --platform).
# BASE_IMAGE: a Python base image from your own registry instead of Docker Hub's."""


@dataclass(frozen=True)
class AgentProject:
    """What ``deploy init`` found in the agent's project directory.

    :param root: the project directory (the build context).
    :param installer: ``"uv"``, ``"poetry"``, ``"requirements"`` or ``"pyproject"``.
    :param dependency_files: the files the dependency layer copies first.
    :param has_pyproject: whether ``pyproject.toml`` exists (the project itself is installed).
    :param app_dir: the directory of the app module, relative to ``root`` (``"."``).
    :param app_import: ``module:attr`` for uvicorn, e.g. ``"agent:app"``.
    :param python: the Python version of the base image.
    :param declares_rollhub: whether the project's dependencies name ``rollhub``.
    """

    root: Path
    installer: str
    dependency_files: tuple[str, ...]
    has_pyproject: bool
    app_dir: str
    app_import: str
    python: str
    declares_rollhub: bool

    @property
    def uses_wheels(self) -> bool:
        """Whether the image installs rollhub from ``./wheels`` (not for uv/poetry locks)."""
        return self.installer in {"requirements", "pyproject"}


def inspect_project(root: str | Path, *, app: str, python: str | None = None) -> AgentProject:
    """Find how the project at ``root`` declares its dependencies and where its app is.

    :param root: the agent project directory.
    :param app: ``path/to/agent.py:app`` (relative to ``root``) or ``package.module:app``.
    :param python: base-image Python version; default from ``requires-python`` or 3.12.
    :raises ConfigError: no project files, an app file that does not exist, a bad version.
    """
    base = Path(root)
    if not base.is_dir():
        raise ConfigError(f"--project {str(root)!r} is not a directory")
    pyproject = base / "pyproject.toml"
    data = _read_pyproject(pyproject) if pyproject.is_file() else {}
    requirements = next((n for n in REQUIREMENTS_FILES if (base / n).is_file()), None)
    files: tuple[str, ...]
    if (base / "uv.lock").is_file() and data:
        installer, files = "uv", ("pyproject.toml", "uv.lock")
    elif (base / "poetry.lock").is_file() and data:
        installer, files = "poetry", ("pyproject.toml", "poetry.lock")
    elif requirements:
        installer, files = "requirements", (requirements,)
    elif data:
        installer, files = "pyproject", ("pyproject.toml",)
    else:
        raise ConfigError(
            f"no pyproject.toml or requirements file in {str(base)!r}: the image installs the "
            f"agent's dependencies from the project's own files (add a pyproject.toml that "
            f"lists rollhub and the agent's libraries)"
        )
    app_dir, app_import = _app_target(base, app)
    version = python or _python_from(data) or DEFAULT_PYTHON
    if not re.fullmatch(r"3\.\d{1,2}", version):
        raise ConfigError(f"--python {version!r}: expected a version like 3.12")
    return AgentProject(
        root=base,
        installer=installer,
        dependency_files=files,
        has_pyproject=bool(data),
        app_dir=app_dir,
        app_import=app_import,
        python=version,
        declares_rollhub=_declares_rollhub(data, base / requirements if requirements else None),
    )


def _read_pyproject(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{str(path)!r} is not valid TOML: {exc}") from exc


def _app_target(base: Path, app: str) -> tuple[str, str]:
    """(app directory, ``module:attr``) for uvicorn, from ``file.py:attr`` or ``mod:attr``."""
    target, _, attr = app.partition(":")
    attr = attr or "app"
    if not target or not attr.isidentifier():
        raise ConfigError(f"--app {app!r}: expected path/to/agent.py:app or package.module:app")
    if target.endswith(".py"):
        path = Path(target)
        if path.is_absolute() or ".." in path.parts:
            raise ConfigError(f"--app {app!r}: the file must be inside the project, relative to it")
        if not (base / path).is_file():
            raise ConfigError(f"--app {app!r}: {str(base / path)!r} does not exist")
        if not path.stem.isidentifier():
            raise ConfigError(f"--app {app!r}: {path.name!r} is not an importable module name")
        return (path.parent.as_posix() or "."), f"{path.stem}:{attr}"
    if not all(part.isidentifier() for part in target.split(".")):
        raise ConfigError(f"--app {app!r}: {target!r} is not a module path")
    return ".", f"{target}:{attr}"


def _python_from(data: dict) -> str | None:
    """The lowest ``3.N`` that ``requires-python`` allows, when it says ``>=3.N``."""
    spec = str(data.get("project", {}).get("requires-python", ""))
    match = re.search(r">=\s*(3\.\d+)", spec)
    if not match:
        return None
    # an old floor (3.8) says little about what the agent is tested on; never go below 3.11,
    # the oldest Python rollhub supports.
    major, minor = match[1].split(".")
    return f"{major}.{max(int(minor), 11)}"


def _declares_rollhub(data: dict, requirements: Path | None) -> bool:
    names: list[str] = list(data.get("project", {}).get("dependencies", []))
    poetry = data.get("tool", {}).get("poetry", {}).get("dependencies", {})
    names.extend(poetry if isinstance(poetry, dict) else [])
    if requirements is not None:
        names.extend(requirements.read_text(encoding="utf-8", errors="replace").splitlines())
    return any(re.match(r"\s*rollhub(\s|\[|=|<|>|~|!|;|$)", str(n)) for n in names)


def _install_steps(project: AgentProject) -> list[str]:
    """RUN/COPY lines: the dependency layer first (cached), then the project's code."""
    files = " ".join(project.dependency_files)
    if project.installer == "uv":
        return [
            "# Dependencies from the project's uv.lock, exactly as locked (no dev group).",
            'RUN pip install "uv>=0.5"',
            "ENV UV_COMPILE_BYTECODE=1 UV_LINK_MODE=copy UV_PROJECT_ENVIRONMENT=/opt/venv",
            f"COPY {files} ./",
            "RUN uv sync --frozen --no-dev --no-install-project",
            "COPY . .",
            "RUN uv sync --frozen --no-dev",
            'ENV PATH="/opt/venv/bin:$PATH"',
        ]
    if project.installer == "poetry":
        return [
            "# Dependencies from the project's poetry.lock, exactly as locked (main group only).",
            'RUN pip install "poetry>=1.8"',
            "ENV POETRY_VIRTUALENVS_CREATE=false POETRY_NO_INTERACTION=1",
            f"COPY {files} ./",
            "RUN poetry install --only main --no-root",
            "COPY . .",
            "RUN poetry install --only main",
        ]
    if project.installer == "requirements":
        lines = [
            f"# Dependencies pinned in the project's {project.dependency_files[0]}; rollhub from",
            f"# the wheels `rollhub deploy` bundles in ./{WHEELS_DIR} (it is not on the public index).",
            f"COPY {WHEELS_DIR}/ ./{WHEELS_DIR}/",
            f"COPY {files} ./",
            f"RUN pip install {FIND_LINKS} -r {project.dependency_files[0]}",
            "COPY . .",
        ]
        if project.has_pyproject:
            lines.append("RUN pip install --no-deps .")
        return lines
    return [
        "# Dependencies from the project's pyproject.toml (ranges resolved at build time;",
        "# commit a uv.lock or requirements.txt for repeatable images); rollhub from the",
        f"# wheels `rollhub deploy` bundles in ./{WHEELS_DIR} (it is not on the public index).",
        "COPY . .",
        f"RUN pip install {FIND_LINKS} .",
    ]


def render_agent_dockerfile(project: AgentProject) -> str:
    """The Dockerfile text for ``project`` (see the module docstring for what it holds)."""
    lines = [
        "# syntax=docker/dockerfile:1",
        "# Written by `rollhub deploy init`: the agent's RolloutApp served for AgentCore Runtime.",
        AMD64_NOTE,
        f"ARG BASE_IMAGE=python:{project.python}-slim",
        "ARG PLATFORM=linux/arm64",
        "FROM --platform=${PLATFORM} ${BASE_IMAGE}",
        "",
        "ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 \\",
        "    PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1",
        "WORKDIR /app",
        "",
        *_install_steps(project),
        "",
        "# Run as an unprivileged user; the code stays owned by root (read-only to the agent).",
        f"RUN useradd --create-home --uid {APP_UID} --shell /usr/sbin/nologin agent",
        f"USER {APP_UID}",
        "",
        f"# AgentCore Runtime sends POST /invocations and GET /ping to port {PORT}.",
        f"EXPOSE {PORT}",
        "CMD ["
        + ", ".join(
            f'"{part}"'
            for part in (
                "python",
                "-m",
                "uvicorn",
                "--app-dir",
                project.app_dir,
                project.app_import,
                "--host",
                "0.0.0.0",
                "--port",
                str(PORT),
            )
        )
        + "]",
    ]
    return "\n".join(lines) + "\n"
