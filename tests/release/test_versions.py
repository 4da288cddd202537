"""One release version: ``VERSION`` is stamped into every distribution, the distributions
require each other within one release line, and ``release/build.py check`` catches a tree
where any of that disagrees."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from release import build as release_build

ROOT = Path(__file__).resolve().parents[2]


def _copy_tree(tmp_path: Path) -> Path:
    """The files ``check`` and ``bump`` read, in a scratch git repository."""
    dst = tmp_path / "repo"
    for folder in release_build.FOLDERS:
        (dst / folder).mkdir(parents=True)
        shutil.copyfile(ROOT / folder / "pyproject.toml", dst / folder / "pyproject.toml")
    (dst / "core" / "rollhub").mkdir()
    shutil.copyfile(ROOT / release_build.CORE_INIT, dst / release_build.CORE_INIT)
    shutil.copyfile(ROOT / "VERSION", dst / "VERSION")
    return dst


def test_every_distribution_is_listed_in_publishing_order() -> None:
    found = {str(p.parent.relative_to(ROOT)) for p in ROOT.glob("*/pyproject.toml")}
    found |= {str(p.parent.relative_to(ROOT)) for p in ROOT.glob("plugins/*/pyproject.toml")}
    assert set(release_build.FOLDERS) == found
    seen: set[str] = set()
    dists = release_build.distributions()
    names = release_build.internal_names(dists)
    for d in dists:  # whatever a distribution requires is published before it
        for req in d.requirements:
            name = re.match(r"[A-Za-z0-9_.-]+", req)
            assert name is not None
            if name.group(0) in names:
                assert name.group(0) in seen, f"{d.name} is published before {name.group(0)}"
        seen.add(d.name)


def test_the_tree_agrees_with_version() -> None:
    version = release_build.read_version()
    assert release_build.check_tree() == []
    want = release_build.compatible_range(version)
    for folder in release_build.FOLDERS:
        project = tomllib.loads((ROOT / folder / "pyproject.toml").read_text())["project"]
        assert project["version"] == version, folder
        reqs = list(project.get("dependencies", []))
        for extra in project.get("optional-dependencies", {}).values():
            reqs += extra
        internal = [r for r in reqs if re.match(r"rollhub(-[a-z]+)*(\[|>|$)", r)]
        assert all(r.endswith(want) for r in internal), (folder, internal)
        if folder != "core":
            assert internal, f"{folder} requires no rollhub distribution"
    import rollhub

    assert rollhub.__version__ == version


def test_compatible_range_is_one_release_line() -> None:
    assert release_build.compatible_range("0.1.0") == ">=0.1.0,<0.2"
    assert release_build.compatible_range("1.4.2") == ">=1.4.2,<1.5"
    assert release_build.compatible_range("2.0.0rc1") == ">=2.0.0rc1,<2.1"
    with pytest.raises(release_build.ReleaseError, match=r"not X\.Y\.Z"):
        release_build.compatible_range("1.4")


def test_check_names_every_disagreement_and_the_fix(tmp_path: Path) -> None:
    repo = _copy_tree(tmp_path)
    gateway = repo / "gateway" / "pyproject.toml"
    gateway.write_text(gateway.read_text().replace('version = "', 'version = "9', 1))
    view = repo / "plugins" / "view" / "pyproject.toml"
    view.write_text(re.sub(r'"rollhub>=[^"]*"', '"rollhub>=0.1"', view.read_text()))
    (repo / "core" / "rollhub" / "__init__.py").write_text('__version__ = "0.0.1"\n')
    problems = release_build.check_tree(repo)
    assert len(problems) == 3, problems
    assert problems[0].startswith("gateway/pyproject.toml: version is '9")
    assert (
        "plugins/view/pyproject.toml: requirement 'rollhub>=0.1' should be rollhub>="
        in (problems[1])
    )
    assert problems[2].startswith("core/rollhub/__init__.py: __version__")
    assert all("release/build.py bump" in p for p in problems)


def test_bump_stamps_every_place_and_nothing_else(tmp_path: Path) -> None:
    repo = _copy_tree(tmp_path)
    before = {f: (repo / f / "pyproject.toml").read_text() for f in release_build.FOLDERS}
    written = release_build.bump("0.3.1", repo)
    assert len(written) == len(release_build.FOLDERS) + 2
    assert (repo / "VERSION").read_text() == "0.3.1\n"
    assert release_build.check_tree(repo) == []
    dists = release_build.distributions(repo)
    assert {d.version for d in dists} == {"0.3.1"}
    gateway = next(d for d in dists if d.name == "rollhub-gateway")
    assert "rollhub>=0.3.1,<0.4" in gateway.requirements
    trl = next(d for d in dists if d.name == "rollhub-trl")
    assert "rollhub-gateway[transformers]>=0.3.1,<0.4" in trl.requirements
    assert "trl>=1.16,<2" in trl.requirements  # third-party ranges are left alone
    for folder, text in before.items():  # only version lines and rollhub requirements changed
        after = (repo / folder / "pyproject.toml").read_text().splitlines()
        changed = [a for a, b in zip(after, text.splitlines(), strict=True) if a != b]
        assert all(("0.3.1" in line) for line in changed), (folder, changed)
        assert 'name = "rollhub' in "\n".join(after)
    with pytest.raises(release_build.ReleaseError):
        release_build.bump("next", repo)
    assert (repo / "VERSION").read_text() == "0.3.1\n"


def test_the_command_line_check_and_hash() -> None:
    script = str(ROOT / "release" / "build.py")
    out = subprocess.run(
        [sys.executable, script, "check"], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert f"every distribution is at {release_build.read_version()}" in out.stdout
    out = subprocess.run(
        [sys.executable, script, "hash"], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert out.stdout.strip() == release_build.source_hash()


def test_the_source_hash_follows_the_sources(tmp_path: Path) -> None:
    rel = {str(f.relative_to(ROOT)) for f in release_build.source_files()}
    assert {
        "VERSION",
        "release/build.py",
        "core/pyproject.toml",
        "sandbox/shim/shim.c",
        "plugins/view/rollhub_view/static/app.js",
    } <= rel
    assert not any("__pycache__" in r or r.endswith(".pyc") for r in rel)

    repo = _copy_tree(tmp_path)
    (repo / "release").mkdir()
    shutil.copyfile(ROOT / "release" / "build.py", repo / "release" / "build.py")
    (repo / ".gitignore").write_text("__pycache__/\n")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    first = release_build.source_hash(repo)
    (repo / "core" / "rollhub" / "__pycache__").mkdir()
    (repo / "core" / "rollhub" / "__pycache__" / "x.pyc").write_bytes(b"ignored")
    assert release_build.source_hash(repo) == first
    (repo / "plugins" / "view" / "rollhub_view").mkdir()
    (repo / "plugins" / "view" / "rollhub_view" / "new.css").write_text("a{}")
    assert release_build.source_hash(repo) != first


def test_build_never_deletes_an_output_directory_it_did_not_write(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(release_build.ReleaseError, match="holds other files"):
        release_build.build(tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "mine"
