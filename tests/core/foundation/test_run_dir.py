"""The run directory has one owner: ``rollhub.runs.run_dir.RunDir`` names its files for every
command that writes or reads one (run, eval, compare, the training loop's parts, the viewer)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from rollhub.errors import UsageError
from rollhub.runs.run_dir import RunDir

ROOT = Path(__file__).resolve().parents[3]

#: modules that read or write run directories through RunDir
READERS_AND_WRITERS = [
    "core/rollhub/commands/run.py",
    "core/rollhub/commands/run_training.py",
    "core/rollhub/commands/eval.py",
    "core/rollhub/runs/comparison.py",
    "core/rollhub/training/checkpoint.py",
    "core/rollhub/training/recorder.py",
    "core/rollhub/training/sinks.py",
    "plugins/view/rollhub_view/run_dir.py",
    "plugins/view/rollhub_view/server.py",
    "plugins/view/rollhub_view/synthetic.py",
]

NAMES = {
    RunDir.CONFIG_COPY, RunDir.CONFIG, RunDir.ORIGIN, RunDir.MANIFEST, RunDir.METRICS,
    RunDir.EPISODES, RunDir.EPISODES_PARQUET, RunDir.SUMMARY, RunDir.TRAINING_PLOT,
    RunDir.PLOTS, RunDir.EVAL, RunDir.CHECKPOINTS,
}


@pytest.mark.parametrize("module", READERS_AND_WRITERS)
def test_run_files_are_named_by_run_dir_alone(module: str) -> None:
    tree = ast.parse((ROOT / module).read_text(encoding="utf-8"))
    literals = {
        node.value for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }
    assert not literals & NAMES, f"{module} spells run files itself: {literals & NAMES}"
    imports = {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
    }
    assert imports & {"rollhub.runs.run_dir", "rollhub_view.run_dir"}  # the viewer's wraps it


def test_a_new_run_starts_with_its_config_and_resumes_from_it(tmp_path: Path) -> None:
    config_file = tmp_path / "train.toml"
    config_file.write_text('[experiment]\nname = "x"\n')
    run = RunDir(tmp_path / "runs" / "one")
    run.create(field="--run-dir")
    run.write_start(config_file, {"experiment": {"name": "x"}}, {"command": "rollhub run"})
    assert (run / RunDir.CONFIG_COPY).read_text() == config_file.read_text()
    assert run.config_source() == str(config_file.resolve())
    run.record_resume({"command": "rollhub run --resume", "git": "abc"})
    manifest = run.manifest()
    assert manifest["command"] == "rollhub run"
    assert manifest["resumed"][0]["command"] == "rollhub run --resume"

    (run / RunDir.ORIGIN).unlink()  # a run of an older rollhub: its config copy
    assert run.config_source() == str(run / RunDir.CONFIG_COPY)
    (run / RunDir.CONFIG_COPY).unlink()
    with pytest.raises(UsageError, match="cannot tell which config"):
        run.config_source()


def test_reads_prefer_jsonl_episodes_and_survive_a_half_written_file(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    assert run.episodes_file() is None
    (tmp_path / RunDir.EPISODES_PARQUET).write_bytes(b"")
    assert run.episodes_file() == tmp_path / RunDir.EPISODES_PARQUET
    run.episodes.write_text("")
    assert run.episodes_file() == run.episodes

    run.eval_report.write_text('{"before": ')
    assert run.read_json(RunDir.EVAL) is None
    run.write_json(RunDir.EVAL, {"before": {"pass_at_1": 0.5}})
    assert json.loads(run.eval_report.read_text()) == {"before": {"pass_at_1": 0.5}}
    assert run.checkpoint_report(run.checkpoints / "step-4") == tmp_path / "eval-step-4.json"
    with pytest.raises(UsageError, match="cannot create the run directory"):
        RunDir(tmp_path / RunDir.EVAL / "below").create(field="experiment.output_dir")
