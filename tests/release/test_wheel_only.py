"""A fresh virtual environment with nothing of rollhub but the built wheels runs what a user
runs: ``rollhub plugins``, ``rollhub config check`` on every example, the main job (short),
and the commands that read package data (``rollhub view``'s page, ``rollhub deploy init``,
the sandbox shim of ``rollhub deploy sandbox``, rollhub-tinker's server requirements).

Every command runs from a scratch directory with an environment that names only that
virtualenv (no PYTHONPATH), on copies of the examples, so nothing of the source tree is
importable.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from release import build as release_build
from tests.release.isolated_env import ROOT, clean_env

pytestmark = pytest.mark.slow

#: the main job, shorter still than the suite's: 1 step of 1 group of 2, no held-out eval
SHORT = {
    "ROLLHUB_TRAINING__STEPS": "1",
    "ROLLHUB_TRAINING__BATCH_GROUPS": "1",
    "ROLLHUB_TRAINING__CHECKPOINT_EVERY": "0",
    "ROLLHUB_EXPERIMENT__N_SAMPLES": "2",
    "ROLLHUB_EVAL__BEFORE_TRAINING": "false",
    "ROLLHUB_EVAL__AFTER_TRAINING": "false",
}


def _run(venv: Path, cwd: Path, *args: str, timeout: float = 120, **env: str):
    return subprocess.run(
        [str(venv / "bin" / args[0]), *args[1:]],
        cwd=cwd,
        env=clean_env(venv, **env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch directory holding a copy of the examples."""
    tmp = tmp_path_factory.mktemp("wheel-only")
    shutil.copytree(ROOT / "examples", tmp / "examples")
    return tmp


@pytest.fixture(scope="module")
def main_job(wheel_venv: Path, work: Path) -> tuple[Path, str]:
    run_dir = work / "run"
    out = _run(
        wheel_venv,
        work,
        "rollhub",
        "run",
        "examples/math/train.toml",
        "--run-dir",
        str(run_dir),
        "--no-progress",
        timeout=900,
        **SHORT,
        ROLLHUB_STORE__URL=f'"file://{work / "store"}"',
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return run_dir, out.stdout


def test_only_the_wheels_provide_rollhub(wheel_venv: Path, work: Path) -> None:
    dists = release_build.distributions()
    packages = [p for d in dists for p in d.packages]
    code = (
        "import importlib, json, sys\n"
        f"mods = {{p: importlib.import_module(p).__file__ for p in {packages!r}}}\n"
        "print(json.dumps({'path': sys.path, 'mods': mods}))\n"
    )
    out = _run(wheel_venv, work, "python", "-c", code)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    site = str(wheel_venv / "lib")
    assert all(f.startswith(site) for f in seen["mods"].values()), seen["mods"]
    assert not any(
        p.startswith(str(ROOT)) and not p.startswith(str(wheel_venv)) for p in seen["path"] if p
    ), seen["path"]
    out = _run(wheel_venv, work, "python", "-m", "pip", "list", "--format", "json")
    installed = {p["name"]: p for p in json.loads(out.stdout)}
    version = release_build.read_version()
    for d in dists:
        assert installed[d.name]["version"] == version
        assert "editable_project_location" not in installed[d.name], d.name
    direct = next((wheel_venv / "lib").glob("python3*/site-packages/rollhub-*.dist-info"))
    url = json.loads((direct / "direct_url.json").read_text())["url"]
    assert url.endswith(f"rollhub-{version}-py3-none-any.whl"), url


def test_rollhub_plugins_lists_every_distribution(wheel_venv: Path, work: Path) -> None:
    out = _run(wheel_venv, work, "rollhub", "plugins", "--json")
    assert out.returncode == 0, out.stderr
    plugins = json.loads(out.stdout)
    version = release_build.read_version()
    by_dist: dict[str, list[dict]] = {}
    for p in plugins:
        by_dist.setdefault(p["distribution"], []).append(p)
    assert set(by_dist) == {d.name for d in release_build.distributions()}
    for name, entries in by_dist.items():
        for p in entries:
            assert p["version"] == version and p["error"] is None, (name, p)
            assert p["status"] in ("ok", "hooks only"), (name, p)
    components = {c for p in plugins for c in p["components"]}
    assert {
        "trainer:torch",
        "trainer:trl",
        "token_source:gateway",
        "sandbox_provider:local",
        "framework:strands",
        "sampling_backend:transformers",
    } <= components


def test_config_check_on_every_example(wheel_venv: Path, work: Path) -> None:
    configs = sorted(p for p in (work / "examples").rglob("*.toml") if p.name != "pyproject.toml")
    assert len(configs) >= 10
    for config in configs:
        out = _run(wheel_venv, work, "rollhub", "config", "check", str(config))
        if config.parent.name == "verl":
            # the verl trainer needs verl itself, an extra too heavy for this environment: the
            # refusal names the extra to install
            assert out.returncode != 0
            assert "pip install 'rollhub-verl[verl]'" in out.stderr, out.stderr
            continue
        assert out.returncode == 0, (config, out.stdout + out.stderr)
        assert f"{config}: ok" in out.stdout


def test_the_main_job_trains(main_job: tuple[Path, str]) -> None:
    run_dir, stdout = main_job
    assert "step 1/1" in stdout and "trained 1/1 steps" in stdout
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0]
    episodes = [json.loads(x) for x in (run_dir / "episodes.jsonl").read_text().splitlines()]
    assert len(episodes) == 2
    assert all(e["traces"] and e["traces"][0]["turns"] for e in episodes if e["status"] == "ok")
    assert any(e["status"] == "ok" for e in episodes)


def test_rollhub_view_serves_its_page(
    wheel_venv: Path, work: Path, main_job: tuple[Path, str]
) -> None:
    run_dir, _ = main_job
    proc = subprocess.Popen(
        [str(wheel_venv / "bin" / "rollhub"), "view", str(run_dir), "--port", "0"],
        cwd=work,
        env=clean_env(wheel_venv),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"http://127\.0\.0\.1:\d+/", line)
        assert m, line + (proc.stderr.read() if proc.poll() is not None and proc.stderr else "")
        base = m.group(0)
        static = ROOT / "plugins" / "view" / "rollhub_view" / "static"
        for path, source in (
            ("", "index.html"),
            ("static/app.js", "app.js"),
            ("static/style.css", "style.css"),
        ):
            with urllib.request.urlopen(base + path, timeout=30) as resp:
                assert resp.read() == (static / source).read_bytes(), path
        with urllib.request.urlopen(base + "static/plotly.min.js", timeout=30) as resp:
            assert len(resp.read()) > 1_000_000  # the plotly package's bundle, not a stub
        with urllib.request.urlopen(base + "api/runs", timeout=30) as resp:
            runs = json.loads(resp.read())["runs"]
        assert len(runs) == 1
    finally:
        proc.terminate()
        proc.wait(10)


def test_deploy_init_writes_the_dockerfile(wheel_venv: Path, work: Path) -> None:
    project = work / "agent"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        '[project]\nname = "my-agent"\nversion = "0.1.0"\nrequires-python = ">=3.11"\n'
        'dependencies = ["rollhub>=0.1", "openai>=1.40"]\n'
    )
    (project / "agent.py").write_text("from rollhub.app import RolloutApp\n\napp = RolloutApp()\n")
    out = _run(wheel_venv, work, "rollhub", "deploy", "init", "--project", str(project))
    assert out.returncode == 0, out.stderr
    assert (project / "Dockerfile").read_text().startswith("# syntax=docker/dockerfile:1")
    assert (project / ".dockerignore").is_file()


def test_deploy_sandbox_finds_the_shim_in_the_wheel(wheel_venv: Path, work: Path) -> None:
    context = work / "sandbox-context"
    out = _run(
        wheel_venv,
        work,
        "rollhub",
        "deploy",
        "sandbox",
        "--base-image",
        "python:3.12-slim",
        "--image-tag",
        "sbx:1",
        "--role-arn",
        "arn:aws:iam::123456789012:role/sbx",
        "--region",
        "us-east-1",
        "--context-dir",
        str(context),
        "--dry-run",
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert (context / "shim.c").read_bytes() == (ROOT / "sandbox/shim/shim.c").read_bytes()
    assert "COPY shim.c" in (context / "Dockerfile").read_text()


def test_the_tinker_server_requirements_ship(wheel_venv: Path, work: Path) -> None:
    code = "from rollhub_tinker.local_server_env import REQUIREMENTS; print(REQUIREMENTS)"
    out = _run(wheel_venv, work, "python", "-c", code)
    assert out.returncode == 0, out.stderr
    shipped = Path(out.stdout.strip())
    assert shipped.is_relative_to(wheel_venv)
    source = ROOT / "plugins/tinker/rollhub_tinker/server-requirements.txt"
    assert shipped.read_text() == source.read_text()


def test_warm_rerun_costs_seconds(dist: Path, wheel_venv: Path) -> None:
    """With unchanged sources the artifacts and the environment are reused as they are."""
    t0 = time.monotonic()
    release_build.build(dist, reuse=True)
    assert time.monotonic() - t0 < 10
    assert (wheel_venv / ".rollhub-release-venv").is_file()
