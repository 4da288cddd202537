"""Agent workers resolve stores through the same plugin discovery as the hub."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

DISK_STORE = """
from rollhub import hookimpl
from rollhub.stores.file import FileResultStore


class DiskStore(FileResultStore):
    name = "disk"

    @classmethod
    def from_url(cls, url, **options):
        return cls(url[len("disk://"):], **options)

    @property
    def url(self):
        return "disk://" + self.root.as_posix()


@hookimpl
def rollhub_register_components(registry):
    registry.add_store(DiskStore)
"""

AGENT = """
from rollhub.app import RolloutApp

app = RolloutApp()


@app.rollout_entrypoint
def handle(payload):
    return {"rewards": 1.0}
"""


def _project(tmp_path: Path, plugins: str = "") -> None:
    (tmp_path / "agent.py").write_text(AGENT)
    (tmp_path / "data.jsonl").write_text('{"id": "a"}\n{"id": "b"}\n')
    (tmp_path / "rollhub.toml").write_text(
        f"""
[experiment]
name = "disk"
dataset = "data.jsonl"
n_samples = 2
timeout_s = 60
progress = false

[runtime]
name = "local"
app = "agent.py:app"
workers = 1

[store]
url = "disk://{tmp_path / "store"}"

[trainer]
name = "export"
formats = ["jsonl"]
{plugins}
"""
    )


def _run_and_check(tmp_path: Path, env: dict[str, str]) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rollhub.cli", "run", "rollhub.toml", "--run-dir", "run"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["by_status"] == {"ok": 4}, summary
    assert len(list((tmp_path / "store").rglob("*.json"))) == 4


def test_workers_see_a_store_an_installed_plugin_registers(install_plugin, tmp_path: Path):
    env = install_plugin("rollhub-disk", "rollhub_disk", DISK_STORE, "disk")
    _project(tmp_path)
    _run_and_check(tmp_path, env)


def test_workers_see_a_store_from_config_plugin_modules(tmp_path: Path):
    import os

    (tmp_path / "disk_plugin.py").write_text(DISK_STORE)
    _project(tmp_path, plugins='[plugins]\nmodules = ["disk_plugin"]')
    _run_and_check(tmp_path, dict(os.environ))
