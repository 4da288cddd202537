"""What ``rollhub run`` leaves and prints: core-only installs, failure causes, trainer files,
the logging level rule."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.core.foundation.project import make_project

# Makes pyarrow and matplotlib unimportable, as on a core-only install.
BLOCK_EXTRAS = """
import sys

class _Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("pyarrow", "matplotlib"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _Blocker())
"""

TRAINER_PLUGIN = """
from rollhub import hookimpl
from rollhub.training import Trainer


class Tally(Trainer):
    name = "tally"

    async def start(self):
        self.n = 0

    async def consume(self, group):
        self.n += len(group.episodes)

    async def close(self):
        path = self.run_dir / "tally.txt"
        path.write_text(str(self.n))
        return {"tally": str(path), "episodes_seen": self.n}


@hookimpl
def rollhub_register_components(registry):
    registry.add_trainer(Tally)
"""


def _rollhub(args: list[str], cwd: Path, env: dict[str, str] | None = None):
    return subprocess.run(
        [sys.executable, "-m", "rollhub.cli", *args],
        cwd=cwd,
        env=env or dict(os.environ),
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_core_only_run_writes_jsonl_and_summary_and_names_the_extras(tmp_path):
    cfg = make_project(tmp_path)
    (tmp_path / "block").mkdir()
    (tmp_path / "block" / "sitecustomize.py").write_text(BLOCK_EXTRAS)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "block"), env.get("PYTHONPATH", "")])
    out = _rollhub(["run", str(cfg), "--run-dir", "run"], tmp_path, env)
    assert out.returncode == 0, out.stdout + out.stderr
    run = tmp_path / "run"
    assert len((run / "episodes.jsonl").read_text().splitlines()) == 4
    assert json.loads((run / "summary.json").read_text())["ok"] == 4
    assert not (run / "episodes.parquet").exists() and not (run / "plots.png").exists()
    assert "rollhub run summary" in out.stdout
    hint = "pip install 'rollhub[export,plot]'"
    assert out.stdout.count(hint) == 1, out.stdout
    assert "Parquet files and plots need extras" in out.stdout
    assert "Traceback" not in out.stderr


def test_summary_names_the_failure_causes(tmp_path):
    rows = [{"id": "a"}, {"id": "b", "fail": True}, {"id": "c", "fail": True}]
    cfg = make_project(tmp_path, rows=rows, extra='[trainer]\nname = "export"\nformats = ["jsonl"]')
    out = _rollhub(["run", str(cfg), "--run-dir", "run"], tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    causes = summary["failure_causes"]
    assert [c["count"] for c in causes] == [2, 2]
    assert {c["message"] for c in causes} == {"cannot solve b", "cannot solve c"}
    assert {(c["status"], c["error_type"]) for c in causes} == {("agent_error", "ValueError")}
    assert "failure cause 1" in out.stdout and "cannot solve b" in out.stdout


def test_a_trainers_outputs_are_listed(tmp_path):
    (tmp_path / "tally_plugin.py").write_text(TRAINER_PLUGIN)
    cfg = make_project(
        tmp_path, extra='[trainer]\nname = "tally"\n\n[plugins]\nmodules = ["tally_plugin"]'
    )
    out = _rollhub(["run", str(cfg), "--run-dir", "run"], tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert (tmp_path / "run" / "tally.txt").read_text() == "4"
    lines = out.stdout.splitlines()
    assert any(ln.split()[:2] == ["tally", "run/tally.txt"] for ln in lines), out.stdout
    assert any(ln.split() == ["episodes_seen", "4"] for ln in lines), out.stdout


def test_log_level_flag_wins_else_the_config_else_warning(tmp_path):
    cfg = make_project(tmp_path, extra='[trainer]\nname = "export"\nformats = ["jsonl"]')
    worker_up = "rollhub.runtimes.local: local worker 0 up"
    quiet = _rollhub(["run", str(cfg), "--run-dir", "r1"], tmp_path)
    assert quiet.returncode == 0 and worker_up not in quiet.stderr, quiet.stderr
    loud = _rollhub(["--log-level", "INFO", "run", str(cfg), "--run-dir", "r2"], tmp_path)
    assert worker_up in loud.stderr
    cfg.write_text(cfg.read_text() + '\n[logging]\nlevel = "INFO"\n')
    from_file = _rollhub(["run", str(cfg), "--run-dir", "r3"], tmp_path)
    assert worker_up in from_file.stderr
    flag_wins = _rollhub(["--log-level", "ERROR", "run", str(cfg), "--run-dir", "r4"], tmp_path)
    assert worker_up not in flag_wins.stderr
