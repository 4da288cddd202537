"""podman for the image tests: the engine, a base image made locally, images by content hash.

No container registry is reachable from CI, so ``FROM python:3.X-slim`` cannot be pulled.
The Dockerfile's base is a build argument; these tests give it a Debian root filesystem
made with ``mmdebstrap`` from the apt repositories, with Python in a virtual environment at
``/usr/local/python`` (``python`` and ``pip`` on ``PATH``, as in the official image) and a
``/etc/pip.conf`` that turns the package index off: the agent image installs everything
from its build context, so its build needs no network.

Every image is tagged with a hash of what it is built from and built only when podman does
not have that tag yet, so a machine that ran the tests once builds nothing again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

# runc: podman's default crun fails on these machines ("cgroups in hybrid mode not
# supported"). The machine also lacks CAP_SYS_RESOURCE, so containers get explicit limits
# below the host's instead of podman's default of raising them.
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1000:1000"]
[engine]
runtime = "{runtime}"
"""

#: Debian release of the base image (its python3 is 3.11).
SUITE = "bookworm"
PYTHON = "3.11"
#: dpkg/apt material the image does not need.
_EXCLUDES = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/locale/*", "/usr/share/info/*")
_BASE_HOOKS = (
    'chroot "$1" python3 -m venv /usr/local/python',
    'printf "[global]\\nno-index = true\\n" > "$1/etc/pip.conf"',
    'rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/*',
)
_BASE_CHANGES = (
    "ENV PATH=/usr/local/python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    'CMD ["python"]',
)

#: Debian architecture → the OCI platform and the manylinux wheel tag of its CPU.
ARCHES = {
    "amd64": ("linux/amd64", "x86_64"),
    "arm64": ("linux/arm64", "aarch64"),
}


class EngineMissing(Exception):
    """podman (or what building the base image needs) is not here; the message says what."""


@dataclass(frozen=True)
class Podman:
    """The podman CLI with this module's containers.conf."""

    executable: str
    env: dict[str, str]

    def __call__(
        self, *args: str, check: bool = True, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        argv = [self.executable, *args]
        log.info("$ %s", " ".join(argv))
        proc = subprocess.run(
            argv, env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"{' '.join(argv[:3])} … failed ({proc.returncode}):\n{proc.stdout[-3000:]}"
                f"\n{proc.stderr[-3000:]}"
            )
        return proc

    def image_exists(self, tag: str) -> bool:
        """Whether podman has an image of this tag."""
        return self("image", "exists", tag, check=False).returncode == 0


def find_podman(conf_dir: Path) -> Podman:
    """A working podman, configured for this machine; raises EngineMissing with the reason."""
    exe = shutil.which("podman")
    if exe is None:
        raise EngineMissing(
            "podman is not installed (.ci/run installs it as root on Debian: "
            "apt-get install podman runc)"
        )
    conf = conf_dir / "containers.conf"
    runtime = "runc" if shutil.which("runc") else "crun"
    conf.write_text(CONTAINERS_CONF.format(runtime=runtime))
    engine = Podman(exe, {**os.environ, "CONTAINERS_CONF": str(conf)})
    info = engine("info", "--format", "{{.Host.Arch}}", check=False, timeout=60)
    if info.returncode != 0:
        raise EngineMissing(f"podman does not work here: {info.stderr.strip()[-300:]}")
    return engine


def host_arch() -> str:
    """This machine's Debian architecture (amd64, arm64)."""
    machine = os.uname().machine
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def can_run(arch: str) -> str | None:
    """None when containers of ``arch`` run here, else why not."""
    if arch == host_arch():
        return None
    qemu = {"arm64": "qemu-aarch64", "amd64": "qemu-x86_64"}[arch]
    entry = Path("/proc/sys/fs/binfmt_misc") / qemu
    if not entry.is_file():
        return (
            f"this {host_arch()} machine cannot run {arch} programs: no {qemu} in "
            f"binfmt_misc (apt-get install qemu-user-static binfmt-support, as root, "
            f"with /proc/sys/fs/binfmt_misc mounted)"
        )
    text = entry.read_text()
    if not text.startswith("enabled") or "F" not in _flags(text):
        # without the F flag the interpreter is looked up inside the container, where it is not
        return f"{entry} is not enabled with the F (fix binary) flag: {text.splitlines()[:3]}"
    return None


def _flags(text: str) -> str:
    match = re.search(r"^flags:\s*(\S*)", text, re.MULTILINE)
    return match[1] if match else ""


def _mirror() -> str:
    """The Debian mirror this machine's apt uses (deb822 or one-line sources)."""
    for path in (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list")):
        if path.is_file():
            match = re.search(r"^(?:URIs:|deb)\s+(\S+/debian)/?\s", path.read_text(), re.MULTILINE)
            if match:
                return match[1]
    return "http://deb.debian.org/debian"


def base_image(engine: Podman, arch: str, workdir: Path) -> str:
    """The tag of the local Python base image for ``arch``, built when podman lacks it."""
    recipe = json.dumps([SUITE, arch, _EXCLUDES, _BASE_HOOKS, _BASE_CHANGES])
    tag = f"localhost/rollhub-test-base:py{PYTHON}-{arch}-{digest(recipe.encode())}"
    if engine.image_exists(tag):
        return tag
    mmdebstrap = shutil.which("mmdebstrap")
    if mmdebstrap is None:
        raise EngineMissing(
            "no base image and no mmdebstrap to make one (no registry is reachable to pull "
            "python:3.X-slim); .ci/run installs it: apt-get install mmdebstrap"
        )
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=workdir, prefix="rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs.tar"
        argv = [
            mmdebstrap, "--variant=minbase", f"--architectures={arch}",
            "--include=python3,python3-venv",
            *(f"--dpkgopt=path-exclude={p}" for p in _EXCLUDES),
            *(f"--customize-hook={h}" for h in _BASE_HOOKS),
            SUITE, str(rootfs), _mirror(),
        ]  # fmt: skip
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False)
        if proc.returncode != 0:
            raise AssertionError(f"mmdebstrap failed:\n{proc.stderr[-3000:]}")
        changes = [arg for change in _BASE_CHANGES for arg in ("--change", change)]
        platform = ARCHES[arch][0]
        engine("import", "--arch", arch, *changes, str(rootfs), tag)
    log.info("built %s (%s) in %.0f s", tag, platform, time.monotonic() - started)
    return tag


def digest(*parts: bytes) -> str:
    """A short content hash for image tags."""
    h = hashlib.sha256()
    for part in parts:
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()[:16]


def context_digest(context: Path) -> str:
    """A hash of every file in the build context (paths and bytes)."""
    files = sorted(p for p in context.rglob("*") if p.is_file())
    return digest(*(f"{p.relative_to(context)}\0".encode() + p.read_bytes() for p in files))
