"""The artifacts of ``release/build.py``: a wheel and an sdist of every distribution, clean
under ``twine check``, each wheel holding every file its package reads at run time."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from release import build as release_build

ROOT = Path(__file__).resolve().parents[2]


def _source_files(folder: Path, package: str) -> set[str]:
    """Every file of ``package`` in the source tree, as wheel paths (no bytecode)."""
    found = set()
    for dirpath, dirnames, filenames in os.walk(folder / package):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in filenames:
            if not name.endswith((".pyc", ".pyo")):
                found.add(str((Path(dirpath) / name).relative_to(folder)))
    return found


def test_a_wheel_and_an_sdist_of_every_distribution(dist: Path) -> None:
    version = release_build.read_version()
    names = sorted(p.name for p in dist.iterdir() if p.name != release_build.STAMP)
    want = []
    for d in release_build.distributions():
        stem = f"{d.name.replace('-', '_')}-{version}"
        want += [f"{stem}-py3-none-any.whl", f"{stem}.tar.gz"]
    assert names == sorted(want)


def test_twine_check_is_clean(dist: Path) -> None:
    files = sorted(str(p) for p in dist.iterdir() if p.suffix in (".whl", ".gz"))
    out = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *files],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("PASSED") == len(files)


def test_each_wheel_holds_every_file_of_its_package(dist: Path) -> None:
    """Templates, static pages, requirement files, py.typed: whatever lies in the package
    folder is in the wheel, and nothing else but the metadata."""
    version = release_build.read_version()
    data_files = {}
    for d in release_build.distributions():
        with zipfile.ZipFile(dist / f"{d.wheel_stem}-py3-none-any.whl") as z:
            members = {m for m in z.namelist() if not m.startswith(f"{d.wheel_stem}.dist-info/")}
        want = set().union(*(_source_files(d.folder, p) for p in d.packages))
        want |= set(d.force_include.values())
        assert members == want, (d.name, members ^ want)
        assert {f"{p}/py.typed" for p in d.packages} <= members
        data_files[d.name] = sorted(m for m in members if not m.endswith((".py", "py.typed")))
        assert d.version == version
    assert data_files["rollhub-sandbox"] == ["rollhub_sandbox/shim/shim.c"]
    assert data_files["rollhub-tinker"] == ["rollhub_tinker/server-requirements.txt"]
    assert data_files["rollhub-view"] == [
        f"rollhub_view/static/{n}" for n in ("app.js", "index.html", "style.css")
    ]


def test_metadata_entry_points_and_inter_requirements(dist: Path) -> None:
    want = release_build.compatible_range(release_build.read_version())
    low, high = want.split(",")
    for d in release_build.distributions():
        with zipfile.ZipFile(dist / f"{d.wheel_stem}-py3-none-any.whl") as z:
            meta = z.read(f"{d.wheel_stem}.dist-info/METADATA").decode()
            eps = z.read(f"{d.wheel_stem}.dist-info/entry_points.txt").decode()
        internal = [line for line in meta.splitlines() if line.startswith("Requires-Dist: rollhub")]
        assert all(low in line and high in line for line in internal), (d.name, internal)
        if d.name == "rollhub":
            assert "[console_scripts]\nrollhub = rollhub.cli:main" in eps
            assert not internal
        else:
            assert internal, d.name
            plugin = d.packages[0]
            assert (
                f"[rollhub]\n{d.entry_points['rollhub'] and next(iter(d.entry_points['rollhub']))}"
                f" = {plugin}.plugin" in eps
            )
        assert "Requires-Python: >=3.11" in meta
        assert "Description-Content-Type: text/markdown" in meta


def test_a_wheel_lacking_a_package_file_is_refused(dist: Path, tmp_path: Path) -> None:
    view = next(d for d in release_build.distributions() if d.name == "rollhub-view")
    good = dist / f"{view.wheel_stem}-py3-none-any.whl"
    bad = tmp_path / good.name
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(bad, "w") as dst:
        for item in src.infolist():
            if item.filename not in ("rollhub_view/static/app.js", "rollhub_view/py.typed"):
                dst.writestr(item, src.read(item.filename))
    version = release_build.read_version()
    names = release_build.internal_names(release_build.distributions())
    assert release_build.wheel_problems(view, good, version, names) == []
    problems = release_build.wheel_problems(view, bad, version, names)
    assert len(problems) == 2, problems
    assert "rollhub_view/py.typed is missing" in problems[0]
    assert "rollhub_view/static/app.js is missing" in problems[1]


def test_an_sdist_builds_its_wheel_on_its_own(dist: Path, tmp_path: Path) -> None:
    """The sandbox's sdist (its wheel force-includes shim/shim.c from beside the package),
    unpacked far from the source tree, builds the same wheel."""
    sandbox = next(d for d in release_build.distributions() if d.name == "rollhub-sandbox")
    with tarfile.open(dist / f"{sandbox.wheel_stem}.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "build",
            "--wheel",
            "--outdir",
            str(tmp_path / "out"),
            str(tmp_path / sandbox.wheel_stem),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    wheel = f"{sandbox.wheel_stem}-py3-none-any.whl"
    with zipfile.ZipFile(tmp_path / "out" / wheel) as z1, zipfile.ZipFile(dist / wheel) as z2:
        assert sorted(z1.namelist()) == sorted(z2.namelist())
        assert z1.read("rollhub_sandbox/shim/shim.c") == (ROOT / "sandbox/shim/shim.c").read_bytes()
