"""The shared environments of third-party packages and the checkouts' thin ones."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests import dependency_envs
from tests.dependency_envs import dependency_env, held, shared_dir, site_packages, thin_venv


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ROLLHUB_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _shared(python: Path) -> None:
    """A "package" in the shared environment, and a .pth file that adds another folder."""
    site = site_packages(python.parent.parent)
    (site / "shared_mod.py").write_text("WHERE = 'shared'\n")
    (site / "clash_mod.py").write_text("WHERE = 'shared'\n")
    extra = site.parent / "extra"
    extra.mkdir()
    (extra / "extra_mod.py").write_text("WHERE = 'extra'\n")
    (site / "extra.pth").write_text(f"{extra}\n")


def _user(cache: Path, name: str, key: str, *, stay: bool = False) -> subprocess.Popen[str]:
    """Another checkout's test run: a process that uses ``<name>-<key>`` (made empty when
    missing) and exits, or with ``stay`` lives until its input is closed."""
    code = (
        "import sys\n"
        "from tests.dependency_envs import shared_dir\n"
        f"shared_dir({name!r}, {key!r}, lambda p: p.mkdir(parents=True))\n"
        "print('using', flush=True)\n"
        "sys.stdin.read()\n"
    )
    user = subprocess.Popen(
        [sys.executable, "-c", code], cwd=Path(__file__).parent.parent, text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        env={**os.environ, "ROLLHUB_CACHE": str(cache)},
    )  # fmt: skip
    assert user.stdout is not None and user.stdout.readline() == "using\n"
    if not stay:
        user.communicate("", timeout=60)
    return user


def test_built_once_and_read_after_the_thin_environments_own(cache: Path, tmp_path: Path) -> None:
    builds: list[Path] = []

    def build(python: Path) -> None:
        builds.append(python)
        _shared(python)

    env = dependency_env("demo", "k1", build)
    assert env == cache / "demo-k1" and builds == [env / "bin" / "python"]
    assert dependency_env("demo", "k1", lambda p: pytest.fail("built twice")) == env
    assert (env / "bin" / "pip").exists()

    python = thin_venv(tmp_path / "thin", env)
    (site_packages(tmp_path / "thin") / "clash_mod.py").write_text("WHERE = 'thin'\n")
    out = subprocess.run(
        [str(python), "-c", "import json, clash_mod, extra_mod, shared_mod\n"
         "print(json.dumps([clash_mod.WHERE, extra_mod.WHERE, shared_mod.WHERE]))"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    # the thin one's own first; the shared one's .pth files are read too
    assert json.loads(out.stdout) == ["thin", "extra", "shared"]
    # pip comes from the shared environment and installs into the thin one
    out = subprocess.run(
        [str(python), "-c", "import pip, sys; print(pip.__file__); print(sys.prefix)"],
        capture_output=True, text=True, check=True,
    )
    pip_file, prefix = out.stdout.split()
    assert pip_file.startswith(str(env)) and prefix == str(tmp_path / "thin")


def test_a_failed_build_is_built_again(cache: Path) -> None:
    def failing(python: Path) -> None:
        raise RuntimeError("the index is down")

    with pytest.raises(RuntimeError, match="index is down"):
        dependency_env("demo", "k1", failing, with_pip=False)
    built: list[Path] = []
    dependency_env("demo", "k1", built.append, with_pip=False)
    assert len(built) == 1


def test_of_one_names_other_keys_the_most_recently_used_stays(cache: Path) -> None:
    assert dependency_envs.KEEP == 2
    for key in ("k1", "k2", "k1", "k3"):  # k1 used again after k2 was made
        _user(cache, "demo", key)
    _user(cache, "other", "k1")
    kept = sorted(p.name for p in cache.iterdir() if not p.name.startswith("."))
    assert kept == ["demo-k1", "demo-k3", "other-k1"]


def test_a_directory_in_use_by_another_run_is_not_deleted(cache: Path) -> None:
    holder = _user(cache, "demo", "k1", stay=True)
    try:
        for key in ("k2", "k3", "k4"):  # three other pins in turn, KEEP = 2
            _user(cache, "demo", key)
        # k1 is the least recently used, but its user still runs from it
        assert (cache / "demo-k1" / dependency_envs.DONE).is_file()
    finally:
        holder.communicate("", timeout=60)
    _user(cache, "demo", "k5")
    kept = sorted(p.name for p in cache.iterdir() if not p.name.startswith("."))
    assert kept == ["demo-k4", "demo-k5"]


def test_a_shared_directory_is_made_once_and_held_by_one_user_at_a_time(cache: Path) -> None:
    made: list[Path] = []
    path = shared_dir("tool", "k1", lambda p: (p.mkdir(parents=True), made.append(p)))
    assert shared_dir("tool", "k1", lambda p: pytest.fail("made twice")) == path == made[0]

    order: list[str] = []
    first_holds = threading.Event()

    def second() -> None:
        first_holds.wait()
        with held(path):
            order.append("second")

    waiter = threading.Thread(target=second)
    waiter.start()
    with held(path):
        first_holds.set()
        waiter.join(timeout=0.5)
        assert waiter.is_alive()  # waiting for the first to let go
        order.append("first")
    waiter.join(timeout=10)
    assert order == ["first", "second"]


def test_a_failing_pip_names_its_arguments_and_says_why(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError) as failed:
        dependency_envs.pip(
            Path(sys.executable), "install", "--no-index", "no-such-package-anywhere", cwd=tmp_path
        )
    message = str(failed.value)
    assert message.startswith("pip install --no-index no-such-package-anywhere failed")
    assert "No matching distribution" in message
