"""Virtual environments of third-party packages, built once per machine and shared by its
checkouts while their pins are unchanged.

Some tests need an environment of their own: verl's pins clash with the shared one, the
release tests install nothing of rollhub but its wheels, agentcore-rl-toolkit 0.1.4 cannot
sit beside 0.2.0. Their third-party packages take minutes to install, and they are the same
in every checkout with the same pins, so they live under ``$ROLLHUB_CACHE`` (default
``~/.cache/rollhub``), one environment per name and key (:func:`dependency_env`). Where the
checkout's own packages belong in it too, the checkout gets a small environment of its own
that reads the shared one's packages after its own (:func:`thin_venv`): seconds to make,
and nothing of one checkout shows in another.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import subprocess
import time
import venv
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

log = logging.getLogger(__name__)

#: of one name's directories, how many stay (the one in use and the most recently used
#: others, and any a running process uses): a checkout on other pins keeps its own instead
#: of rebuilding it at every switch
KEEP = 2

DONE = ".rollhub-built"
USED = ".rollhub-used"

#: the shared locks this process holds on the directories it uses, until it exits: a run
#: on other pins then leaves them in place (:func:`_forget_others`)
_USING: dict[Path, IO[str]] = {}


def cache_root() -> Path:
    """Where the shared environments live: ``$ROLLHUB_CACHE`` or ``~/.cache/rollhub``."""
    return Path(os.environ.get("ROLLHUB_CACHE", Path.home() / ".cache" / "rollhub"))


def site_packages(env: Path) -> Path:
    """The site-packages directory of the virtual environment ``env``."""
    found = sorted(env.glob("lib/python3*/site-packages"))
    if len(found) != 1:
        raise RuntimeError(f"{env} has {len(found)} site-packages directories, not one")
    return found[0]


def shared_dir(name: str, key: str, make: Callable[[Path], None]) -> Path:
    """The directory ``<cache>/<name>-<key>``, made by ``make(path)`` when missing.

    :param key: what the directory is made from, hashed (the pins, the Python version):
        another key is another directory. Of one name's directories the ``KEEP`` most
        recently used stay, and any that a running process uses: this process uses the
        directory until it exits.
    :param make: fills the directory it is given (not yet there); it counts as made once
        ``make`` returns, so one that raised is made again next time.
    :returns: the directory.
    """
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{name}-{key}"
    done = path / DONE
    with open(root / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two runs must not make one at once
        if not done.is_file():
            started = time.monotonic()
            shutil.rmtree(path, ignore_errors=True)  # one that was not finished
            make(path)
            done.write_text(key)
            log.warning("made %s in %.0f s", path, time.monotonic() - started)
        # the order of use, which decides what _forget_others keeps: a clock reading in the
        # file, not the file's mtime, which some file systems keep to the second
        (path / USED).write_text(str(time.time_ns()))
        _use(path)  # under the name's lock: pruning cannot come in between
        _forget_others(root, name, path)
    return path


def _users_lock(path: Path) -> Path:
    return path.parent / f".{path.name}.users"


def _use(path: Path) -> None:
    if path not in _USING:
        # left open: the lock is this process's use, until it exits
        users = open(_users_lock(path), "w")
        fcntl.flock(users, fcntl.LOCK_SH)
        _USING[path] = users


@contextmanager
def held(path: Path) -> Iterator[None]:
    """Hold ``path`` alone while the block runs: a tool that writes into a shared directory
    and cannot share it (mypy's SQLite cache) runs one checkout at a time."""
    with open(path.parent / f".{path.name}.in-use", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def dependency_env(
    name: str, key: str, build: Callable[[Path], None], *, with_pip: bool = True
) -> Path:
    """The virtual environment ``<cache>/<name>-<key>`` (:func:`shared_dir`), made by
    ``build(python)`` when missing.

    :param build: installs the packages with the interpreter it is given, that of a fresh
        virtual environment (with pip unless ``with_pip`` is false).
    :returns: the environment's root directory.
    """

    def make(env: Path) -> None:
        venv.EnvBuilder(with_pip=with_pip).create(env)
        build(env / "bin" / "python")

    return shared_dir(name, key, make)


def _last_use(path: Path) -> int:
    try:
        return int((path / USED).read_text())
    except (OSError, ValueError):
        return 0


def _forget_others(root: Path, name: str, current: Path) -> None:
    others = [p for p in root.glob(f"{name}-*") if p != current and (p / DONE).is_file()]
    others.sort(key=_last_use, reverse=True)
    for old in others[KEEP - 1 :]:
        with open(_users_lock(old), "w") as users:
            try:
                fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                log.info("kept %s: a run is using it", old)
                continue
            shutil.rmtree(old, ignore_errors=True)
            _users_lock(old).unlink()


def thin_venv(path: Path, dependencies: Path) -> Path:
    """A fresh virtual environment at ``path`` that finds the packages of ``dependencies``
    after its own; :returns: its interpreter.

    It has no pip of its own: ``python -m pip`` runs the shared environment's and installs
    here. Packages installed here (the checkout's, editable or from wheels) come first.
    """
    shutil.rmtree(path, ignore_errors=True)
    venv.EnvBuilder(with_pip=False).create(path)
    shared = site_packages(dependencies)
    # an `import` line of a .pth file runs at start-up: addsitedir also reads the shared
    # environment's own .pth files, which a plain path line would skip
    (site_packages(path) / "_rollhub_dependencies.pth").write_text(
        f"import site; site.addsitedir({str(shared)!r})\n"
    )
    return path / "bin" / "python"


def pip(python: Path, *args: str, cwd: Path, env: dict[str, str] | None = None) -> None:
    """Run ``python -m pip ARGS`` in ``cwd``.

    :raises RuntimeError: pip failed; the message names the arguments and ends with pip's
        own output.
    """
    cmd = [str(python), "-m", "pip", "--disable-pip-version-check", *args]
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        output = (done.stdout[-2000:] + done.stderr[-4000:]).strip()
        raise RuntimeError(f"pip {' '.join(args)} failed:\n{output}")
