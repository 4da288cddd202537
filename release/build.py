#!/usr/bin/env python3
"""Build and check rollhub's release artifacts: a wheel and an sdist of every distribution.

    python3 release/build.py                  # same as `build`
    python3 release/build.py build [--out DIR] [--reuse] [--no-isolation]
    python3 release/build.py check            # versions and inter-requirements agree with VERSION
    python3 release/build.py bump 0.2.0       # write VERSION and stamp it everywhere
    python3 release/build.py hash             # content hash of what the artifacts are built from

The release version lives in one place, the repository's ``VERSION`` file. ``bump`` stamps
it into every distribution's ``pyproject.toml`` (``version`` and the ranges with which the
distributions require each other) and into ``rollhub.__version__``; ``check`` fails when any
of them disagrees, and ``build`` refuses to build then. The pyproject files keep static
versions so that every sdist builds its wheel on its own, with no file outside it.

``build`` runs ``python -m build`` on each distribution (an sdist, then the wheel built from
that sdist), ``twine check --strict`` on everything, and checks each wheel against its
source: every non-Python file of the package, ``py.typed``, the entry points, the version
and the inter-requirements. With ``--reuse`` an ``--out`` directory whose stamp matches the
sources' content hash is kept as it is. Needs ``build`` and ``twine`` in the interpreter
that runs this script (``pip install build twine``). Importing this module does nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import re
import shutil
import subprocess
import sys
import time
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]
VERSION_FILE = ROOT / "VERSION"

#: every distribution's folder, in publishing order: each one after what it requires
FOLDERS = (
    "core",
    "gateway",
    "sandbox",
    "plugins/frameworks",
    "plugins/rllm",
    "plugins/slime",
    "plugins/tinker",
    "plugins/torch",
    "plugins/trl",
    "plugins/verl",
    "plugins/view",
)

#: where ``rollhub.__version__`` is written (``import rollhub`` reads no metadata)
CORE_INIT = "core/rollhub/__init__.py"

#: the stamp ``build`` leaves in its output directory: the content hash it was built from
STAMP = "SOURCES.sha256"

_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)((?:a|b|rc)\d+)?")
_INTERNAL_REQ = re.compile(r'"(rollhub(?:-[a-z0-9]+)*)(\[[^\]]*\])?([^";]*)"')
#: a quoted requirement with a specifier: what ``bump`` rewrites (not ``name = "rollhub"``)
_STAMPABLE = re.compile(r'"(rollhub(?:-[a-z0-9]+)*)(\[[^\]]*\])?((?:>=|<=|==|~=|!=|<|>)[^";]*)"')
_PROJECT_VERSION = re.compile(r'(?m)^version = "[^"]*"$')
_DUNDER_VERSION = re.compile(r'(?m)^__version__ = "[^"]*"$')


class ReleaseError(Exception):
    """The tree or an artifact is not releasable; the message says what and how to fix it."""


@dataclass(frozen=True)
class Distribution:
    """One distribution of the repository, read from its ``pyproject.toml``."""

    folder: Path
    name: str
    version: str
    packages: tuple[str, ...]
    requirements: tuple[str, ...]
    entry_points: dict[str, dict[str, str]]
    force_include: dict[str, str]

    @property
    def wheel_stem(self) -> str:
        """The file-name prefix of this distribution's wheel and sdist."""
        return f"{self.name.replace('-', '_')}-{self.version}"


def read_distribution(folder: Path) -> Distribution:
    """Read ``folder/pyproject.toml``."""
    data = tomllib.loads((folder / "pyproject.toml").read_text())
    project = data["project"]
    wheel = data.get("tool", {}).get("hatch", {}).get("build", {}).get("targets", {})
    wheel = wheel.get("wheel", {})
    requirements = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        requirements += extra
    entry_points = dict(project.get("entry-points", {}))
    if "scripts" in project:
        entry_points["console_scripts"] = project["scripts"]
    return Distribution(
        folder=folder,
        name=project["name"],
        version=project["version"],
        packages=tuple(wheel.get("packages", ())),
        requirements=tuple(requirements),
        entry_points=entry_points,
        force_include=dict(wheel.get("force-include", {})),
    )


def distributions(root: Path = ROOT) -> list[Distribution]:
    """Every distribution, in publishing order."""
    return [read_distribution(root / f) for f in FOLDERS]


def read_version(root: Path = ROOT) -> str:
    """The release version from ``VERSION``.

    :raises ReleaseError: the file is missing or holds no X.Y.Z[aN|bN|rcN] version.
    """
    path = root / "VERSION"
    if not path.is_file():
        raise ReleaseError(f"{path} is missing: write the release version (e.g. 0.1.0) into it")
    version = path.read_text().strip()
    if not _VERSION.fullmatch(version):
        raise ReleaseError(f"VERSION: {version!r} is not X.Y.Z (optionally aN, bN or rcN)")
    return version


def compatible_range(version: str) -> str:
    """The specifier with which the distributions of ``version`` require each other.

    At least this release, below the next minor one: patch releases of one line mix, a
    new minor line is released together.
    """
    m = _VERSION.fullmatch(version)
    if m is None:
        raise ReleaseError(f"{version!r} is not X.Y.Z (optionally aN, bN or rcN)")
    major, minor = int(m.group(1)), int(m.group(2))
    return f">={version},<{major}.{minor + 1}"


def internal_names(dists: list[Distribution]) -> set[str]:
    """The names of the repository's distributions."""
    return {d.name for d in dists}


def check_tree(root: Path = ROOT) -> list[str]:
    """Every place where the tree disagrees with ``VERSION``; empty when releasable."""
    version = read_version(root)
    want = compatible_range(version)
    dists = distributions(root)
    names = internal_names(dists)
    fix = f"run: python3 release/build.py bump {version}"
    problems = []
    for d in dists:
        where = d.folder.relative_to(root) / "pyproject.toml"
        if d.version != version:
            problems.append(f"{where}: version is {d.version!r}, VERSION says {version!r} ({fix})")
        for req in d.requirements:
            m = _INTERNAL_REQ.fullmatch(f'"{req}"')
            if m and m.group(1) in names and m.group(3).replace(" ", "") != want:
                problems.append(
                    f"{where}: requirement {req!r} should be "
                    f"{m.group(1)}{m.group(2) or ''}{want} ({fix})"
                )
    init = (root / CORE_INIT).read_text()
    m = _DUNDER_VERSION.search(init)
    if m is None or m.group(0) != f'__version__ = "{version}"':
        problems.append(f"{CORE_INIT}: __version__ is not {version!r} ({fix})")
    return problems


def bump(version: str, root: Path = ROOT) -> list[Path]:
    """Write ``version`` into ``VERSION`` and stamp it everywhere; returns the files written."""
    want = compatible_range(version)  # validates before anything is written
    names = internal_names(distributions(root))

    def stamp_requirement(m: re.Match[str]) -> str:
        if m.group(1) not in names:
            return m.group(0)
        return f'"{m.group(1)}{m.group(2) or ""}{want}"'

    written = [root / "VERSION"]
    (root / "VERSION").write_text(version + "\n")
    for folder in FOLDERS:
        path = root / folder / "pyproject.toml"
        text = _PROJECT_VERSION.sub(f'version = "{version}"', path.read_text(), count=1)
        path.write_text(_STAMPABLE.sub(stamp_requirement, text))
        written.append(path)
    init = root / CORE_INIT
    init.write_text(_DUNDER_VERSION.sub(f'__version__ = "{version}"', init.read_text(), count=1))
    written.append(init)
    return written


def source_files(root: Path = ROOT) -> list[Path]:
    """The files the artifacts are built from: each distribution's tracked and untracked,
    not ignored files, plus ``VERSION`` and this script."""
    out = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z", "--", *FOLDERS],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout.decode()
    files = {root / p for p in out.split("\0") if p}
    files |= {root / "VERSION", root / "release" / "build.py"}
    return sorted(f for f in files if f.is_file())


def source_hash(root: Path = ROOT) -> str:
    """SHA-256 over the names and contents of :func:`source_files`."""
    h = hashlib.sha256()
    for f in source_files(root):
        h.update(str(f.relative_to(root)).encode() + b"\0")
        h.update(f.read_bytes())
    return h.hexdigest()


def package_data(dist: Distribution) -> dict[str, Path]:
    """Non-Python files the wheel must hold: wheel path -> source file (each package's
    non-``.py`` files, ``py.typed`` included, and the ``force-include`` entries)."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z", "--", *dist.packages],
        cwd=dist.folder,
        capture_output=True,
        check=True,
    ).stdout.decode()
    want = {p: dist.folder / p for p in listed.split("\0") if p and not p.endswith(".py")}
    for src, dest in dist.force_include.items():
        want[dest] = dist.folder / src
    return want


def wheel_problems(dist: Distribution, wheel: Path, version: str, names: set[str]) -> list[str]:
    """What ``wheel`` lacks or gets wrong compared with ``dist``'s source."""
    problems = []
    with zipfile.ZipFile(wheel) as z:
        members = set(z.namelist())
        info = f"{dist.wheel_stem}.dist-info"
        metadata = z.read(f"{info}/METADATA").decode()
        entry_points = z.read(f"{info}/entry_points.txt").decode() if dist.entry_points else ""
    for pkg in dist.packages:
        if f"{pkg}/py.typed" not in members:
            problems.append(
                f"{wheel.name}: {pkg}/py.typed is missing "
                f"(add an empty {dist.folder / pkg / 'py.typed'})"
            )
    for member, src in package_data(dist).items():
        if member not in members and not member.endswith("/py.typed"):
            problems.append(f"{wheel.name}: {member} is missing (from {src})")
    for group, targets in dist.entry_points.items():
        for name, target in targets.items():
            if not re.search(
                rf"(?ms)^\[{re.escape(group)}\]$.*^{re.escape(name)} = "
                rf"{re.escape(target)}$",
                entry_points,
            ):
                problems.append(f"{wheel.name}: entry point [{group}] {name} = {target} missing")
    if f"\nVersion: {version}\n" not in metadata:
        problems.append(f"{wheel.name}: METADATA does not say Version: {version}")
    want = compatible_range(version)
    for line in metadata.splitlines():
        m = re.fullmatch(r"Requires-Dist: (rollhub(?:-[a-z0-9]+)*)(\[[^\]]*\])?([^;]*)(;.*)?", line)
        if (
            m
            and m.group(1) in names
            and set(m.group(3).replace(" ", "").split(",")) != set(want.split(","))
        ):
            problems.append(f"{wheel.name}: {line!r} is not {m.group(1)}{want}")
    return problems


def build(
    out: Path,
    *,
    reuse: bool = False,
    isolation: bool = True,
    python: str = sys.executable,
    root: Path = ROOT,
) -> list[Path]:
    """Build, twine-check and content-check every distribution into ``out``.

    :returns: the artifacts (wheels and sdists), in publishing order.
    :raises ReleaseError: versions disagree, a build or ``twine check`` fails, or a wheel
        lacks what its source ships.
    """
    problems = check_tree(root)
    if problems:
        raise ReleaseError("the tree is not releasable:\n  " + "\n  ".join(problems))
    digest = source_hash(root)
    dists = distributions(root)
    if reuse and (out / STAMP).is_file() and (out / STAMP).read_text().strip() == digest:
        log.info("%s is current (sources %s): reused", out, digest[:12])
        return _artifacts(out, dists)
    for tool in ("build", "twine"):
        if subprocess.run([python, "-c", f"import {tool}"], capture_output=True).returncode:
            raise ReleaseError(f"{python} has no {tool!r}: pip install build twine")
    if out.exists():
        # only ever delete what an earlier build left there
        strays = [p.name for p in out.iterdir() if not _is_artifact(p)]
        if strays:
            raise ReleaseError(
                f"--out {out} holds other files ({', '.join(sorted(strays)[:3])}"
                f"): pass an empty directory or one this command wrote"
            )
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for d in dists:
        t0 = time.monotonic()
        # no --sdist/--wheel: build makes the sdist, then the wheel from the unpacked sdist,
        # which proves the sdist is complete
        cmd = [python, "-m", "build", "--outdir", str(out), str(d.folder)]
        if not isolation:
            cmd.insert(3, "--no-isolation")
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            raise ReleaseError(f"building {d.name} failed:\n{done.stdout[-3000:]}{done.stderr}")
        log.info("built %s in %.1fs", d.name, time.monotonic() - t0)
    artifacts = _artifacts(out, dists)
    twine = subprocess.run(
        [python, "-m", "twine", "check", "--strict", *map(str, artifacts)],
        capture_output=True,
        text=True,
    )
    if twine.returncode:
        raise ReleaseError(f"twine check failed:\n{twine.stdout}{twine.stderr}")
    problems = []
    version, names = read_version(root), internal_names(dists)
    for d in dists:
        problems += wheel_problems(d, out / f"{d.wheel_stem}-py3-none-any.whl", version, names)
    if problems:
        raise ReleaseError("the wheels are incomplete:\n  " + "\n  ".join(problems))
    (out / STAMP).write_text(digest + "\n")
    return artifacts


def _is_artifact(path: Path) -> bool:
    return path.is_file() and (path.name == STAMP or path.name.endswith((".whl", ".tar.gz")))


def _artifacts(out: Path, dists: list[Distribution]) -> list[Path]:
    paths = []
    for d in dists:
        for path in (out / f"{d.wheel_stem}-py3-none-any.whl", out / f"{d.wheel_stem}.tar.gz"):
            if not path.is_file():
                raise ReleaseError(f"{path} was not built")
            paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    """The command line; returns the exit code."""
    parser = argparse.ArgumentParser(prog="release/build.py", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command")
    b = sub.add_parser("build", help="wheels and sdists of every distribution, checked")
    b.add_argument("--out", type=Path, default=ROOT / "dist", help="output directory (dist/)")
    b.add_argument(
        "--reuse", action="store_true", help=f"keep --out when its {STAMP} matches the sources"
    )
    b.add_argument(
        "--no-isolation",
        action="store_true",
        help="build with this interpreter's hatchling (no isolated build env)",
    )
    sub.add_parser("check", help="versions and inter-requirements agree with VERSION")
    v = sub.add_parser("bump", help="write VERSION and stamp it into every distribution")
    v.add_argument("version", help="the new version, X.Y.Z (optionally aN, bN or rcN)")
    sub.add_parser("hash", help="print the content hash of the sources")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        if args.command == "check":
            problems = check_tree()
            for p in problems:
                print(p, file=sys.stderr)
            if not problems:
                print(f"every distribution is at {read_version()}")
            return 1 if problems else 0
        if args.command == "bump":
            for path in bump(args.version):
                print(f"wrote {path.relative_to(ROOT)}")
            return 0
        if args.command == "hash":
            print(source_hash())
            return 0
        out = args.out if args.command == "build" else ROOT / "dist"
        t0 = time.monotonic()
        artifacts = build(
            out,
            reuse=getattr(args, "reuse", False),
            isolation=not getattr(args, "no_isolation", False),
        )
    except ReleaseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for path in artifacts:
        print(path)
    print(
        f"{len(artifacts)} artifacts in {out} ({time.monotonic() - t0:.0f} s), "
        f"twine check and content checks passed"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
