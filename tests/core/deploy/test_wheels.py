"""Where the image gets each rollhub distribution, and the wheels ``deploy`` bundles.

The distributions are real: a small hatchling project built with pip and installed with
pip into a directory put on ``sys.path``, so ``importlib.metadata`` reads the same
``dist-info`` (``RECORD``, ``direct_url.json``) a user's environment has.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from rollhub.deploy.errors import DeployError
from rollhub.deploy.wheels import (
    RollhubRequirement,
    WheelChoice,
    parse_rollhub_requirement,
    plan_wheels,
    project_requirements,
    write_wheels,
)

PIP = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("rollhub", ("rollhub", "", None)),
        ("rollhub[s3] >= 0.1", ("rollhub", ">=0.1", None)),
        ("rollhub==0.3.0  # published", ("rollhub", "==0.3.0", None)),
        ("Rollhub_Gateway~=0.1; python_version>='3.11'", ("rollhub-gateway", "~=0.1", None)),
        (
            "rollhub @ https://example.com/rollhub.whl",
            ("rollhub", "", "https://example.com/rollhub.whl"),
        ),
        ("rollhubx>=1", None),
        ("openai>=1.40", None),
        ("rollhub; extra == 'agents'", None),
        ("# rollhub", None),
        ("-e ./rollhub", None),
    ],
)
def test_parse_requirement_lines(line: str, expected: tuple | None) -> None:
    req = parse_rollhub_requirement(line)
    assert (None if req is None else (req.name, req.specifier, req.url)) == expected


def test_exact_pins() -> None:
    assert parse_rollhub_requirement("rollhub==0.3.0").exact_version == "0.3.0"
    assert parse_rollhub_requirement("rollhub>=0.3.0").exact_version is None
    assert parse_rollhub_requirement("rollhub==0.*").exact_version is None


def test_project_requirements_from_pyproject_and_requirements(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "a"\ndependencies = ["rollhub[s3]>=0.1", "openai"]\n'
    )
    (tmp_path / "requirements.txt").write_text("openai==1\nrollhub-gateway==0.1.0\n")
    names = [r.name for r in project_requirements(tmp_path, ("pyproject.toml",))]
    assert names == ["rollhub"]
    names = [r.name for r in project_requirements(tmp_path, ("requirements.txt",))]
    assert names == ["rollhub-gateway"]


# Real installed distributions -------------------------------------------------------------


def _demo_project(root: Path, name: str, deps: list[str]) -> Path:
    module = name.replace("-", "_")
    (root / module).mkdir(parents=True)
    (root / module / "__init__.py").write_text(f"NAME = {name!r}\n")
    (root / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["hatchling>=1.21"]\nbuild-backend = "hatchling.build"\n'
        f'[project]\nname = "{name}"\nversion = "1.2.0"\nrequires-python = ">=3.11"\ndependencies = {json.dumps(deps)}\n'
        f'[tool.hatch.build.targets.wheel]\npackages = ["{module}"]\n'
    )
    return root


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """rollhub-demo-a (a checkout and its wheel) and rollhub-demo-b, which requires it."""
    base = tmp_path_factory.mktemp("demo")
    a = _demo_project(base / "src-a", "rollhub-demo-a", ["six; extra == 'never'"])
    b = _demo_project(base / "src-b", "rollhub-demo-b", ["rollhub-demo-a>=1"])
    dist = base / "dist"
    subprocess.run([*PIP, "wheel", "--no-deps", "-w", dist, a, b], check=True)
    return {"a": a, "b": b, "wheel_a": next(dist.glob("rollhub_demo_a-*.whl")),
            "wheel_b": next(dist.glob("rollhub_demo_b-*.whl"))}  # fmt: skip


def _install(site: Path, *wheels: Path) -> Path:
    subprocess.run(
        [*PIP, "install", "--no-deps", "--no-index", "--target", site, *wheels], check=True
    )
    return site


def _dist_info(site: Path, name: str) -> Path:
    return next(site.glob(f"{name.replace('-', '_')}-*.dist-info"))


def _req(text: str) -> RollhubRequirement:
    req = parse_rollhub_requirement(text)
    assert req is not None
    return req


def test_local_wheel_is_copied_then_repacked_when_gone(
    demo: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheel = tmp_path / demo["wheel_a"].name
    shutil.copy(demo["wheel_a"], wheel)
    site = _install(tmp_path / "site", wheel)
    monkeypatch.syspath_prepend(str(site))
    (choice,) = plan_wheels([_req("rollhub-demo-a>=1")])
    assert (choice.source, choice.version, choice.path) == ("copy", "1.2.0", wheel)
    wheel.unlink()  # pip's direct_url.json still names it
    (choice,) = plan_wheels([_req("rollhub-demo-a>=1")])
    assert choice.source == "repack" and choice.bundled
    (repacked,) = write_wheels([choice], tmp_path / "ctx")
    assert repacked.name == "rollhub_demo_a-1.2.0-py3-none-any.whl"
    with zipfile.ZipFile(repacked) as whl:
        names = set(whl.namelist())
        record = whl.read("rollhub_demo_a-1.2.0.dist-info/RECORD").decode()
    assert "rollhub_demo_a/__init__.py" in names
    assert not any(n.endswith(("INSTALLER", "direct_url.json", ".pyc")) for n in names)
    assert "rollhub_demo_a/__init__.py,sha256=" in record
    # pip accepts the re-packed wheel and installs the same module
    again = _install(tmp_path / "again", repacked)
    assert (again / "rollhub_demo_a/__init__.py").read_text() == "NAME = 'rollhub-demo-a'\n"


def test_checkout_is_built_and_dependencies_follow(
    demo: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = _install(tmp_path / "site", demo["wheel_a"], demo["wheel_b"])
    # b as an editable install of its checkout: direct_url.json names the directory
    info = _dist_info(site, "rollhub-demo-b")
    (info / "direct_url.json").write_text(
        json.dumps({"url": demo["b"].as_uri(), "dir_info": {"editable": True}})
    )
    shutil.rmtree(site / "rollhub_demo_b")
    monkeypatch.syspath_prepend(str(site))
    b, a = plan_wheels([_req("rollhub-demo-b")])
    assert (b.source, b.path) == ("build", demo["b"])
    assert (
        a.name == "rollhub-demo-a"
        and a.requirement == "rollhub-demo-a>=1 (required by rollhub-demo-b)"
    )
    assert a.source == "copy"  # pip installed it from the wheel file, still on disk
    ctx = tmp_path / "ctx"
    (ctx / "wheels").mkdir(parents=True)
    (ctx / "wheels" / "rollhub_demo_b-0.9.0-py3-none-any.whl").write_text("old")
    (ctx / "wheels" / "mylib-1.0-py3-none-any.whl").write_text("theirs")
    written = write_wheels([b, a], ctx)
    assert sorted(p.name for p in (ctx / "wheels").iterdir()) == [
        "constraints.txt",
        "mylib-1.0-py3-none-any.whl",
        "rollhub_demo_a-1.2.0-py3-none-any.whl",
        "rollhub_demo_b-1.2.0-py3-none-any.whl",
    ]
    assert len(written) == 2
    pins = (ctx / "wheels" / "constraints.txt").read_text().splitlines()[1:]
    assert pins == ["rollhub-demo-b==1.2.0", "rollhub-demo-a==1.2.0"]


def test_a_checkout_on_the_import_path_wins(
    demo: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The code this process imports (a checkout on PYTHONPATH shadowing an install) is
    the code that goes into the image."""
    site = _install(tmp_path / "site", demo["wheel_a"])
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(demo["a"]))
    (choice,) = plan_wheels([_req("rollhub-demo-a")])
    assert (choice.source, choice.path) == ("build", demo["a"])


def test_published_pinned_missing_and_url_are_not_bundled(
    demo: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = _install(tmp_path / "site", demo["wheel_a"])
    (_dist_info(site, "rollhub-demo-a") / "direct_url.json").unlink()  # as from an index
    monkeypatch.syspath_prepend(str(site))
    choices = plan_wheels(
        [
            _req("rollhub-demo-a"),
            _req("rollhub-demo-missing>=1"),
            _req("rollhub-demo-url @ https://example.com/x.whl"),
        ]
    )
    assert [(c.source, c.bundled) for c in choices] == [
        ("index", False),
        ("index", False),
        ("url", False),
    ]
    assert "installed from a package index" in choices[0].reason
    assert "not installed here" in choices[1].reason
    written = write_wheels(choices, tmp_path / "ctx")
    assert written == []
    assert (tmp_path / "ctx/wheels/constraints.txt").read_text().count("==") == 0


def test_a_pin_to_another_version_keeps_the_index(
    demo: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(_install(tmp_path / "site", demo["wheel_a"])))
    (other,) = plan_wheels([_req("rollhub-demo-a==0.3.0")])
    assert other.source == "index" and "pinned" in other.reason
    (same,) = plan_wheels([_req("rollhub-demo-a==1.2.0")])
    assert same.source == "copy"


def test_a_failed_build_names_the_checkout(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "pyproject.toml").write_text("[project\nname = 'rollhub-broken'\n")  # not TOML
    choice = WheelChoice("rollhub-broken", "rollhub-broken", "build", "1", broken, "")
    with pytest.raises(DeployError, match=r"building the wheel of .*broken") as info:
        write_wheels([choice], tmp_path / "ctx")
    assert info.value.step == "wheels"
