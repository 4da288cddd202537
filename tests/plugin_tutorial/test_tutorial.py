"""docs/writing-a-plugin.md, for real: its files are this folder's files, and the package
installed with pip into a fresh virtualenv holding only the core runs end to end."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import venv
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DOC = ROOT / "docs" / "writing-a-plugin.md"
BLOCK = re.compile(r"\*\*`([^`]+)`\*\*\n\n```\w*\n(.*?)```", re.S)


def _tutorial_files() -> set[str]:
    files = set()
    for top in ("rollhub-tally", "project"):
        for path in (HERE / top).rglob("*"):
            rel = path.relative_to(HERE)
            # build outputs of a local pip install are not the tutorial's files
            skip = {"__pycache__", "build"} & set(rel.parts) or ".egg-info" in str(rel)
            if path.is_file() and not skip:
                files.add(rel.as_posix())
    return files


def test_the_page_shows_every_file_in_full_and_nothing_else():
    shown = dict(BLOCK.findall(DOC.read_text(encoding="utf-8")))
    assert set(shown) == _tutorial_files()
    for rel, text in shown.items():
        assert text == (HERE / rel).read_text(encoding="utf-8"), f"{rel} differs from the page"


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 600):
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_fresh_venv_with_only_the_core_and_the_tutorial_plugin(tmp_path):
    venv.EnvBuilder(with_pip=True).create(tmp_path / "venv")
    bin_dir = tmp_path / "venv" / "bin"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    # a copy: pip builds in the source tree and would leave build files in the repository
    shutil.copytree(HERE / "rollhub-tally", tmp_path / "rollhub-tally")
    shutil.copytree(HERE / "project", tmp_path / "project")
    install = _run(
        [
            str(bin_dir / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            str(ROOT / "core"),
            str(tmp_path / "rollhub-tally"),
        ],
        tmp_path,
        env,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    rollhub = str(bin_dir / "rollhub")
    # the core only: none of the optional extras came along
    probe = _run([str(bin_dir / "python"), "-c", "import pyarrow"], tmp_path, env)
    assert probe.returncode != 0

    listing = _run([rollhub, "plugins", "--json"], tmp_path, env)
    assert listing.returncode == 0, listing.stderr
    rows = {r["plugin"]: r for r in json.loads(listing.stdout)}
    assert rows["tally"]["status"] == "ok"
    assert rows["tally"]["distribution"] == "rollhub-tally"
    assert rows["tally"]["components"] == ["runtime:inline", "store:memory", "trainer:tally"]
    assert rows["tally"]["hooks"] == ["rollhub_add_commands", "rollhub_collect_rewards"]

    project = tmp_path / "project"
    check = _run([rollhub, "config", "check", "rollhub.toml"], project, env)
    assert check.returncode == 0, check.stderr
    assert "dataset=3 prompts" in check.stdout

    run = _run([rollhub, "run", "rollhub.toml", "--no-progress", "--run-dir", "run"], project, env)
    assert run.returncode == 0, run.stdout + run.stderr
    summary = json.loads((project / "run" / "summary.json").read_text())
    assert summary["by_status"] == {"agent_error": 2, "ok": 4}
    assert summary["reward_mean"] == 0.5  # the reward hook: one prompt right, one wrong
    assert summary["failure_causes"] == [
        {
            "status": "agent_error",
            "error_type": "ValueError",
            "message": "refusing prompt refused",
            "count": 2,
        }
    ]
    assert "2× agent_error ValueError: refusing prompt refused" in run.stdout
    assert "pip install 'rollhub[plot]'" in run.stdout
    tally = json.loads((project / "run" / "tally.json").read_text())
    assert tally["one-plus-one"] == {"samples": 2, "ok": 2, "mean_reward": 1.0}
    assert "tally.json" in run.stdout

    shown = _run([rollhub, "tally", "run"], project, env)
    assert shown.returncode == 0, shown.stderr
    assert "two-plus-two 2/2 ok  mean reward 0.00" in shown.stdout

    # the default trainer on a core-only install: JSONL, the summary, one note on extras
    env_export = {**env, "ROLLHUB_TRAINER__NAME": "export"}
    run = _run(
        [rollhub, "run", "rollhub.toml", "--no-progress", "--run-dir", "run2"], project, env_export
    )
    assert run.returncode == 0, run.stdout + run.stderr
    rows = (project / "run2" / "episodes.jsonl").read_text().splitlines()
    assert len(rows) == 6 and all(json.loads(r)["exp_id"] == "tally-demo" for r in rows)
    assert not (project / "run2" / "episodes.parquet").exists()
    assert run.stdout.count("pip install 'rollhub[export,plot]'") == 1
    assert "refusing prompt refused" in run.stdout
