"""The rollhub wheels an agent image installs from its build context (``wheels/``).

rollhub is not on the public package index, so ``pip install -r requirements.txt`` in the
image cannot find it. ``rollhub deploy init`` and ``rollhub deploy agentcore`` put a wheel of
each rollhub distribution the project names (and the rollhub distributions those need) into
``PROJECT/wheels/``, with ``wheels/constraints.txt`` pinning their versions; the Dockerfile
installs with ``pip install --find-links ./wheels -c ./wheels/constraints.txt``. Third-party
libraries still come from the package index.

Where each distribution comes from (:func:`plan_wheels`, first rule that applies):

===============================================  ======================================
the requirement / the copy installed here        the image gets
===============================================  ======================================
``rollhub @ URL``                                the URL, as written
not installed here                               the package index
``rollhub==V`` and V is not the installed one    rollhub V from the index (a published pin)
its code is imported from a source checkout      ``pip wheel --no-deps CHECKOUT``
(editable install, ``direct_url.json`` names a
directory, or a checkout on ``PYTHONPATH``)
installed from a local ``.whl`` still on disk    that file
installed from a URL or VCS                      the installed files, re-packed as a wheel
installed from an index (no ``direct_url.json``)  the index (it is published there)
===============================================  ======================================
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata as metadata
import importlib.util
import json
import logging
import re
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import unquote, urlsplit

from rollhub.deploy.errors import DeployError

__all__ = [
    "CONSTRAINTS",
    "WHEELS_DIR",
    "RollhubRequirement",
    "WheelChoice",
    "parse_rollhub_requirement",
    "plan_wheels",
    "write_wheels",
]

log = logging.getLogger(__name__)

#: the build-context directory the Dockerfile installs rollhub from.
WHEELS_DIR = "wheels"
#: the file in :data:`WHEELS_DIR` pinning the bundled versions (pip ``-c``).
CONSTRAINTS = "constraints.txt"

_NAME = re.compile(
    r"^\s*(?P<name>rollhub(?:[-_.][A-Za-z0-9]+)*)\s*(?:\[(?P<extras>[^\]]*)\])?\s*(?P<rest>.*)$",
    re.IGNORECASE,
)


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class RollhubRequirement:
    """One requirement naming a rollhub distribution.

    :param name: the canonical distribution name (``rollhub``, ``rollhub-gateway``).
    :param specifier: the version part (``==0.3.0``, ``>=0.1``, ``""``).
    :param url: the direct reference of ``name @ URL``, else None.
    :param text: the requirement as written (for messages).
    """

    name: str
    specifier: str
    url: str | None
    text: str

    @property
    def exact_version(self) -> str | None:
        """V of ``==V`` / ``===V``, else None."""
        match = re.fullmatch(r"===?\s*([^\s,;*]+)", self.specifier)
        return match[1] if match else None


def parse_rollhub_requirement(line: str) -> RollhubRequirement | None:
    """The requirement ``line`` as a :class:`RollhubRequirement`; None when it names no
    rollhub distribution (another package, a comment, a pip option) or only under an extra."""
    text = line.split(" #", 1)[0].strip()
    match = _NAME.match(text)
    if not match or text.startswith(("-", "#")):
        return None
    rest = match["rest"]
    if rest and not rest.startswith(("@", "=", "<", ">", "~", "!", ";", ",", "(")):
        return None  # e.g. "rollhubx": another name that only starts like ours
    rest, _, marker = rest.partition(";")
    if "extra" in marker:
        return None  # needed only with an extra the image may not ask for
    rest = rest.strip()
    url = rest[1:].strip() if rest.startswith("@") else None
    spec = "" if url else rest.strip("() ").replace(" ", "")
    return RollhubRequirement(_canonical(match["name"]), spec, url, text)


@dataclass(frozen=True)
class WheelChoice:
    """Where the image gets one rollhub distribution.

    :param name: the canonical distribution name.
    :param requirement: the requirement that asked for it, as written.
    :param source: ``"index"``, ``"url"`` (not bundled), ``"build"``, ``"copy"`` or
        ``"repack"`` (bundled).
    :param version: the installed version that is bundled (None when not bundled).
    :param path: the checkout (build), the wheel file (copy) or None.
    :param reason: one line saying why (printed by ``deploy init``).
    """

    name: str
    requirement: str
    source: str
    version: str | None
    path: Path | None
    reason: str

    @property
    def bundled(self) -> bool:
        """Whether a wheel of it goes into ``wheels/``."""
        return self.source in {"build", "copy", "repack"}


def project_requirements(root: Path, files: tuple[str, ...]) -> list[RollhubRequirement]:
    """The rollhub requirements of the project at ``root``, read from ``files``
    (``pyproject.toml`` and/or a requirements file, as ``inspect_project`` found them)."""
    lines: list[str] = []
    for name in files:
        path = root / name
        if name == "pyproject.toml":
            data = tomllib.loads(path.read_text(encoding="utf-8"))
            lines.extend(map(str, data.get("project", {}).get("dependencies", [])))
        elif path.is_file():
            lines.extend(path.read_text(encoding="utf-8", errors="replace").splitlines())
    unique: dict[str, RollhubRequirement] = {}
    for req in map(parse_rollhub_requirement, lines):
        if req is not None:
            unique.setdefault(req.name, req)  # reported by the first line naming it
    return list(unique.values())


def plan_wheels(requirements: list[RollhubRequirement]) -> list[WheelChoice]:
    """Decide, per distribution, where the image gets it (see the module docstring).

    Bundled distributions bring the rollhub distributions they depend on (their installed
    metadata's ``Requires-Dist``), decided by the same rules.
    """
    choices: dict[str, WheelChoice] = {}
    pending = list(requirements)
    while pending:
        req = pending.pop(0)
        if req.name in choices:
            continue
        choice = _choose(req)
        choices[req.name] = choice
        if choice.bundled:
            for line in metadata.distribution(req.name).requires or []:
                dep = parse_rollhub_requirement(line)
                if dep is not None and dep.name not in choices:
                    pending.append(replace(dep, text=f"{dep.text} (required by {req.name})"))
    return list(choices.values())


def _choose(req: RollhubRequirement) -> WheelChoice:
    def index(reason: str) -> WheelChoice:
        return WheelChoice(req.name, req.text, "index", None, None, reason)

    if req.url is not None:
        return WheelChoice(req.name, req.text, "url", None, None, f"from {req.url}, as written")
    try:
        dist = metadata.distribution(req.name)
    except metadata.PackageNotFoundError:
        return index(f"{req.name} is not installed here: the image installs it from the index")
    version = dist.version
    pinned = req.exact_version
    if pinned is not None and pinned != version:
        return index(f"{req.text} is pinned (installed here: {version}): from the index")
    checkout = _checkout(dist, req.name)
    if checkout is not None:
        return WheelChoice(
            req.name, req.text, "build", version, checkout, f"{version} built from {checkout}"
        )
    direct = _direct_url(dist)
    if direct is None:
        return index(f"{req.name} {version} was installed from a package index: from the index")
    wheel = _local_wheel(direct)
    if wheel is not None:
        return WheelChoice(req.name, req.text, "copy", version, wheel, f"{version} from {wheel}")
    return WheelChoice(
        req.name, req.text, "repack", version, None, f"{version} re-packed from its installed files"
    )


def _direct_url(dist: metadata.Distribution) -> dict | None:
    text = dist.read_text("direct_url.json")
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _file_path(url: str) -> Path | None:
    parts = urlsplit(url)
    return Path(unquote(parts.path)) if parts.scheme == "file" else None


def _local_wheel(direct: dict) -> Path | None:
    path = _file_path(str(direct.get("url", "")))
    if "archive_info" in direct and path is not None and path.suffix == ".whl":
        return path if path.is_file() else None
    return None


def _checkout(dist: metadata.Distribution, name: str) -> Path | None:
    """The source checkout this process imports ``name`` from, else the directory its
    ``direct_url.json`` names; None for an install from an index, a wheel or a VCS URL."""
    try:
        spec = importlib.util.find_spec(name.replace("-", "_"))
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:
        for parent in Path(spec.origin).resolve().parents[1:3]:
            if _project_name(parent) == name:
                return parent
    direct = _direct_url(dist)
    if direct is not None and "dir_info" in direct:
        path = _file_path(str(direct.get("url", "")))
        if path is not None and _project_name(path) == name:
            return path
    return None


def _project_name(directory: Path) -> str | None:
    pyproject = directory / "pyproject.toml"
    if not pyproject.is_file():
        return None
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError):
        return None
    name = data.get("project", {}).get("name")
    return _canonical(name) if isinstance(name, str) else None


def write_wheels(choices: list[WheelChoice], context: Path) -> list[Path]:
    """Put a wheel of each bundled choice into ``context/wheels`` and write the constraints.

    Earlier wheels of these distributions are removed first (also of those now taken from
    the index); other files stay (wheels of your own packages may live there too). The constraints file always exists, so the
    Dockerfile's ``-c`` works when nothing is bundled.

    :raises DeployError: a wheel could not be built (``step="wheels"``, pip's message).
    """
    out = context / WHEELS_DIR
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    pins: list[str] = []
    for choice in choices:
        for old in out.glob(f"{choice.name.replace('-', '_')}-*.whl"):
            old.unlink()
        if not choice.bundled:
            continue
        if choice.source == "build":
            assert choice.path is not None
            written.append(_build(choice.path, out))
        elif choice.source == "copy":
            assert choice.path is not None
            target = out / choice.path.name
            target.write_bytes(choice.path.read_bytes())
            written.append(target)
        else:
            written.append(repack(metadata.distribution(choice.name), out))
        pins.append(f"{choice.name}=={choice.version}")
    header = "# Written by `rollhub deploy`: the bundled rollhub wheels' versions.\n"
    (out / CONSTRAINTS).write_text(header + "".join(f"{p}\n" for p in pins), encoding="utf-8")
    for path in written:
        log.info("bundled %s", path)
    return written


def _build(checkout: Path, out: Path) -> Path:
    """``pip wheel --no-deps`` of ``checkout`` into ``out``; the wheel's path."""
    with tempfile.TemporaryDirectory(prefix="rollhub-wheel-") as tmp:
        argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "--wheel-dir", tmp,
                str(checkout)]  # fmt: skip
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        built = sorted(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or len(built) != 1:
            detail = (proc.stderr or proc.stdout).strip().splitlines()
            raise DeployError(
                f"building the wheel of {checkout} failed (exit {proc.returncode}): "
                f"{detail[-1] if detail else 'no wheel was written'}; run "
                f"`pip wheel --no-deps {checkout}` to see why",
                step="wheels",
                exit_code=proc.returncode,
            )
        target = out / built[0].name
        target.write_bytes(built[0].read_bytes())
        return target


def repack(dist: metadata.Distribution, out: Path) -> Path:
    """A wheel of ``dist`` made from its installed files (its ``RECORD``).

    Files installed outside the package directory (scripts, headers, data) are left out:
    pip writes console scripts again from ``entry_points.txt``. The installer's own files
    (``INSTALLER``, ``REQUESTED``, ``direct_url.json``) are dropped and ``RECORD`` is
    written anew with each file's hash.
    """
    base = Path(str(dist.locate_file("")))
    files = [f for f in dist.files or [] if not str(f).startswith("..")]
    info = next((f.parts[0] for f in files if f.parts[0].endswith(".dist-info")), None)
    if info is None:
        raise DeployError(f"{dist.metadata['Name']} has no .dist-info to re-pack", step="wheels")
    skip = {f"{info}/{n}" for n in ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json")}
    wheel_text = (base / info / "WHEEL").read_text(encoding="utf-8")
    name = f"{info.removesuffix('.dist-info')}-{_tag(wheel_text)}.whl"
    target = out / name
    record: list[str] = []
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as whl:
        for rel in sorted(str(f) for f in files):
            if rel in skip or "__pycache__" in rel or rel.endswith(".pyc"):
                continue
            data = (base / rel).read_bytes()
            whl.writestr(zipfile.ZipInfo(rel, date_time=(1980, 1, 1, 0, 0, 0)), data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{rel},sha256={digest.decode()},{len(data)}")
        record.append(f"{info}/RECORD,,")
        whl.writestr(
            zipfile.ZipInfo(f"{info}/RECORD", date_time=(1980, 1, 1, 0, 0, 0)),
            "\n".join(record) + "\n",
        )
    return target


def _tag(wheel_text: str) -> str:
    """The file-name tag (``py3-none-any``) from a WHEEL file's ``Tag:`` lines."""
    tags = [line.split(":", 1)[1].strip() for line in wheel_text.splitlines()
            if line.startswith("Tag:")]  # fmt: skip
    if not tags:
        return "py3-none-any"
    parts = [t.split("-") for t in tags]
    return "-".join(".".join(sorted({p[i] for p in parts})) for i in range(3))
