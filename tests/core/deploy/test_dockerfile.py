"""The agent Dockerfile of ``rollhub deploy init``, checked statically."""

from __future__ import annotations

from pathlib import Path

import pytest
from rollhub.deploy.dockerfile import DOCKERIGNORE, inspect_project, render_agent_dockerfile
from rollhub.errors import ConfigError

from tests.core.deploy.dockerfile_lint import (
    check_agentcore_image,
    copies_before_install,
    expand,
    global_args,
    parse,
    serve_command,
)

LOCKS = ("uv", "poetry")


def _project(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


PYPROJECT = '[project]\nname = "a"\nversion = "0"\ndependencies = ["rollhub"]\n'


@pytest.mark.parametrize(
    ("files", "installer", "first_copies", "install_line"),
    [
        ({"uv.lock": ""}, "uv", ["pyproject.toml", "uv.lock"], "RUN uv sync --frozen --no-dev"),
        (
            {"poetry.lock": ""},
            "poetry",
            ["pyproject.toml", "poetry.lock"],
            "RUN poetry install --only main",
        ),
        (
            {"requirements.txt": "rollhub==0.1.0\n"},
            "requirements",
            ["wheels/", "requirements.txt"],
            "RUN pip install --find-links ./wheels -c ./wheels/constraints.txt -r requirements.txt",
        ),
        (
            {},
            "pyproject",
            ["."],
            "RUN pip install --find-links ./wheels -c ./wheels/constraints.txt .",
        ),
    ],
)
def test_each_dependency_layout_passes_the_checks(
    tmp_path: Path, files: dict, installer: str, first_copies: list, install_line: str
) -> None:
    root = _project(tmp_path / "p", {"pyproject.toml": PYPROJECT, "agent.py": "", **files})
    project = inspect_project(root, app="agent.py:app")
    assert project.installer == installer and project.declares_rollhub
    text = render_agent_dockerfile(project)
    assert check_agentcore_image(text) == []
    # dependencies are installed from the project's own files, before the code is copied
    assert copies_before_install(text) == first_copies
    assert install_line in [f"{i.keyword} {i.args}" for i in parse(text)]
    assert serve_command(text) == [
        "python", "-m", "uvicorn", "--app-dir", ".", "agent:app",
        "--host", "0.0.0.0", "--port", "8080",
    ]  # fmt: skip
    # the note for amd64 hosts is in the file
    assert "amd64 host" in text and "--platform linux/arm64" in text
    # rollhub comes from the bundled wheels exactly when there is no lock to decide
    assert ("--find-links ./wheels" in text) == project.uses_wheels == (installer not in LOCKS)


def test_base_image_and_platform_are_build_arguments(tmp_path: Path) -> None:
    root = _project(tmp_path / "p", {"pyproject.toml": PYPROJECT, "agent.py": ""})
    text = render_agent_dockerfile(inspect_project(root, app="agent.py", python="3.12"))
    assert global_args(parse(text)) == {"BASE_IMAGE": "python:3.12-slim", "PLATFORM": "linux/arm64"}
    (frm,) = [i for i in parse(text) if i.keyword == "FROM"]
    assert frm.args == "--platform=${PLATFORM} ${BASE_IMAGE}"
    # without --build-arg the build is what AgentCore runs
    assert expand(frm.args, global_args(parse(text))) == "--platform=linux/arm64 python:3.12-slim"


def test_requirements_with_pyproject_installs_the_project_without_deps(tmp_path: Path) -> None:
    root = _project(
        tmp_path / "p",
        {"pyproject.toml": PYPROJECT, "requirements.lock": "x==1\n", "agent.py": ""},
    )
    text = render_agent_dockerfile(inspect_project(root, app="agent.py:app"))
    lines = [f"{i.keyword} {i.args}" for i in parse(text)]
    install = (
        "RUN pip install --find-links ./wheels -c ./wheels/constraints.txt -r requirements.lock"
    )
    assert lines.index(install) < lines.index("COPY . .")
    assert "RUN pip install --no-deps ." in lines


def test_app_in_a_subdirectory_and_module_form(tmp_path: Path) -> None:
    root = _project(tmp_path / "p", {"pyproject.toml": PYPROJECT, "src/bot/main.py": ""})
    text = render_agent_dockerfile(inspect_project(root, app="src/bot/main.py:application"))
    assert serve_command(text)[3:6] == ["--app-dir", "src/bot", "main:application"]
    text = render_agent_dockerfile(inspect_project(root, app="bot.main"))
    assert serve_command(text)[3:6] == ["--app-dir", ".", "bot.main:app"]


def test_python_version_from_requires_python_or_flag(tmp_path: Path) -> None:
    files = {"agent.py": "", "pyproject.toml": PYPROJECT + 'requires-python = ">=3.12"\n'}
    root = _project(tmp_path / "p", files)
    assert "ARG BASE_IMAGE=python:3.12-slim" in render_agent_dockerfile(
        inspect_project(root, app="agent.py")
    )
    assert inspect_project(root, app="agent.py", python="3.13").python == "3.13"
    old = _project(
        tmp_path / "o",
        {
            "agent.py": "",
            "pyproject.toml": PYPROJECT.replace(
                "dependencies", 'requires-python = ">=3.8"\ndependencies'
            ),
        },
    )
    assert inspect_project(old, app="agent.py").python == "3.11"
    with pytest.raises(ConfigError, match="--python"):
        inspect_project(root, app="agent.py", python="latest")


def test_missing_rollhub_dependency_is_reported(tmp_path: Path) -> None:
    root = _project(
        tmp_path / "p",
        {"agent.py": "", "pyproject.toml": '[project]\nname="a"\ndependencies=["rollhub-x"]\n'},
    )
    assert not inspect_project(root, app="agent.py").declares_rollhub


@pytest.mark.parametrize(
    ("files", "app", "match"),
    [
        ({"agent.py": ""}, "agent.py:app", "no pyproject.toml or requirements"),
        ({"pyproject.toml": PYPROJECT}, "agent.py:app", "does not exist"),
        ({"pyproject.toml": PYPROJECT, "agent.py": ""}, "../agent.py:app", "inside the project"),
        ({"pyproject.toml": PYPROJECT, "my-agent.py": ""}, "my-agent.py", "importable"),
        ({"pyproject.toml": PYPROJECT}, "pkg.mod:not-valid", "--app"),
        ({"pyproject.toml": "[project\n", "agent.py": ""}, "agent.py", "not valid TOML"),
    ],
)
def test_bad_projects_are_config_errors(tmp_path: Path, files: dict, app: str, match: str) -> None:
    root = _project(tmp_path / "p", files)
    with pytest.raises(ConfigError, match=match):
        inspect_project(root, app=app)


def test_dockerignore_keeps_secrets_out() -> None:
    patterns = {line for line in DOCKERIGNORE.splitlines() if line and not line.startswith("#")}
    assert {".env", ".env.*", "*.pem", "*.key", ".aws/", ".git/", ".venv/"} <= patterns


# The checks themselves must be able to fail, or passing them proves nothing.


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (lambda t: t.replace("FROM --platform=${PLATFORM} ", "FROM "), "--platform=linux/arm64"),
        (lambda t: t.replace("PLATFORM=linux/arm64", "PLATFORM=linux/amd64"), "linux/arm64"),
        (lambda t: t.replace("USER 10001", "USER root"), "is root"),
        (lambda t: t.replace("USER 10001\n", ""), "no USER"),
        (lambda t: t.replace("EXPOSE 8080", "EXPOSE 9000"), "EXPOSE 8080"),
        (lambda t: t + "ENV OPENAI_API_KEY=sk-abcdefghijklmnopqrstuv\n", "looks like a secret"),
        (lambda t: t + "ARG AWS_SECRET_ACCESS_KEY\n", "looks like a secret"),
        (lambda t: t + "RUN echo AKIAABCDEFGHIJKLMNOP > /c\n", "credential-like"),
        (
            lambda t: t.replace('CMD ["python", "-m", "uvicorn"', 'CMD python -m uvicorn ["x"'),
            "shell form",
        ),
    ],
)
def test_the_checker_catches_each_problem(tmp_path: Path, edit, problem: str) -> None:
    root = _project(tmp_path / "p", {"pyproject.toml": PYPROJECT, "agent.py": "", "uv.lock": ""})
    text = render_agent_dockerfile(inspect_project(root, app="agent.py"))
    problems = check_agentcore_image(edit(text))
    assert any(problem in p for p in problems), problems


def test_parser_joins_continuations_and_skips_comments() -> None:
    text = "# c\nFROM --platform=linux/arm64 x AS a\nRUN a \\\n  # inner\n  && b\n\nUSER 1\n"
    got = [(i.keyword, i.args, i.line) for i in parse(text)]
    assert got == [
        ("FROM", "--platform=linux/arm64 x AS a", 2),
        ("RUN", "a    && b", 3),
        ("USER", "1", 7),
    ]
