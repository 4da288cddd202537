"""Bad input to ``rollhub run`` / ``rollhub config check``: exit 2, one line, nothing left."""

from __future__ import annotations

from pathlib import Path

import pytest
from rollhub.cli import main

from tests.core.foundation.project import make_project


def _edit(cfg: Path, old: str, new: str) -> None:
    text = cfg.read_text()
    assert old in text
    cfg.write_text(text.replace(old, new))


def _missing_dataset(cfg: Path) -> None:
    (cfg.parent / "data.jsonl").unlink()


def _bad_line(cfg: Path) -> None:
    (cfg.parent / "data.jsonl").write_text('{"id": "a"}\nnot json\n')


def _bad_id(cfg: Path) -> None:
    (cfg.parent / "data.jsonl").write_text('{"id": "a"}\n{"id": "../b"}\n')


def _slash_id(cfg: Path) -> None:
    (cfg.parent / "data.jsonl").write_text('{"id": "a/b"}\n')


def _spaced_id(cfg: Path) -> None:
    (cfg.parent / "data.jsonl").write_text('{"id": "a b"}\n')


def _missing_app(cfg: Path) -> None:
    _edit(cfg, 'app = "agent.py:app"', 'app = "nowhere.py:app"')


def _missing_attr(cfg: Path) -> None:
    _edit(cfg, 'app = "agent.py:app"', 'app = "agent.py:application"')


def _missing_module(cfg: Path) -> None:
    _edit(cfg, 'app = "agent.py:app"', 'app = "no_such_pkg.agent:app"')


def _s3_no_bucket(cfg: Path) -> None:
    _edit(cfg, 'url = "file://store"', 'url = "s3://"')


def _store_under_file(cfg: Path) -> None:
    (cfg.parent / "blocker").write_text("")
    _edit(cfg, 'url = "file://store"', 'url = "file://blocker/store"')


def _output_under_file(cfg: Path) -> None:
    (cfg.parent / "blocker").write_text("")
    _edit(cfg, 'output_dir = "runs"', 'output_dir = "blocker/runs"')


def _store_under_proc(cfg: Path) -> None:
    # a directory every check of permissions passes (root may "write" anywhere) that
    # refuses to hold one: only trying to create it tells
    _edit(cfg, 'url = "file://store"', 'url = "file:///proc/rollhub-store"')


def _output_under_proc(cfg: Path) -> None:
    _edit(cfg, 'output_dir = "runs"', 'output_dir = "/proc/rollhub-runs"')


def _unknown_trainer(cfg: Path) -> None:
    cfg.write_text(cfg.read_text() + '\n[trainer]\nname = "nosuch"\n')


def _bad_trainer_option(cfg: Path) -> None:
    cfg.write_text(cfg.read_text() + '\n[trainer]\nname = "export"\nformats = ["csv"]\n')


CASES = [
    (_missing_dataset, "experiment.dataset", "does not exist"),
    (_bad_line, "data.jsonl:2", "not valid JSON"),
    (_bad_id, "'../b'", "rename it"),
    (_slash_id, "'a/b'", "rename it"),
    (_spaced_id, "'a b'", "not a valid key part"),
    (_missing_app, "runtime.app", "does not exist"),
    (_missing_attr, "runtime.app", "no top-level 'application'"),
    (_missing_module, "runtime.app", "no module 'no_such_pkg.agent'"),
    (_s3_no_bucket, "store.url", "names no bucket"),
    (_store_under_file, "store.url", "is a file"),
    (_output_under_file, "experiment.output_dir", "is a file"),
    (_store_under_proc, "store.url", "cannot create or write in '/proc/rollhub-store'"),
    (_output_under_proc, "experiment.output_dir", "cannot create or write in '/proc/rollhub-runs'"),
    (_unknown_trainer, "trainer.name", "no trainer named 'nosuch'"),
    (_bad_trainer_option, "trainer.formats", "csv"),
]


@pytest.mark.parametrize(("breaks", "field", "says"), CASES, ids=[c[0].__name__ for c in CASES])
def test_bad_config_is_a_usage_error_before_anything_is_written(
    breaks, field, says, tmp_path, capsys
):
    cfg = make_project(tmp_path)
    breaks(cfg)
    assert main(["config", "check", str(cfg)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rollhub: error: ") and "\n" not in err, err
    assert field in err and says in err, err
    assert main(["run", str(cfg)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and field in err and says in err, err
    assert "Traceback" not in err
    assert not (tmp_path / "runs").exists()
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--n-samples", "0"], "--n-samples 0"),
        (["--n-samples", "-1"], "--n-samples -1"),
        (["--max-prompts", "0"], "--max-prompts 0"),
        (["--max-prompts", "-2"], "--max-prompts -2"),
    ],
)
def test_bad_counts_on_the_command_line(args, says, tmp_path, capsys):
    cfg = make_project(tmp_path)
    assert main(["run", str(cfg), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"rollhub: error: {says}: ") and "\n" not in err, err
    assert "greater than or equal to 1" in err and "pydantic" not in err
    assert not (tmp_path / "runs").exists()


def test_run_dir_that_cannot_be_created(tmp_path, capsys):
    cfg = make_project(tmp_path)
    (tmp_path / "blocker").write_text("")
    assert main(["run", str(cfg), "--run-dir", str(tmp_path / "blocker" / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rollhub: error: --run-dir: cannot create the run directory"), err
    assert "\n" not in err


def test_config_check_passes_a_good_project_and_counts_its_prompts(tmp_path, capsys):
    cfg = make_project(tmp_path)
    assert main(["config", "check", str(cfg)]) == 0
    assert "dataset=2 prompts" in capsys.readouterr().out


def test_config_check_refuses_what_run_would_refuse(tmp_path, capsys):
    from rollhub.cli import main

    (tmp_path / "data.jsonl").write_text('{"id": "a"}\n')
    cases = {
        # a local runtime with no app to serve
        '[experiment]\nname = "x"\ndataset = "data.jsonl"\n': "runtime.app",
        # no prompts for a trainer the core's loop (or one pass) feeds
        '[experiment]\nname = "x"\n[runtime]\napp = "agent.py:app"\n': "experiment.dataset",
    }
    (tmp_path / "agent.py").write_text("app = None\n")
    for text, field in cases.items():
        cfg = tmp_path / "rollhub.toml"
        cfg.write_text(text)
        assert main(["config", "check", str(cfg)]) == 2, text
        err = capsys.readouterr().err
        assert field in err, (text, err)
        assert not (tmp_path / "runs").exists()
