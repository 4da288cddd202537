"""The CLI's exit codes and one-line errors."""

from __future__ import annotations

import pytest
from rollhub.cli import main


def test_help_of_every_subcommand(capsys):
    for cmd in (["plugins"], ["config", "check"], ["run"], ["export"], ["gateway"]):
        with pytest.raises(SystemExit) as ei:
            main([*cmd, "--help"])
        assert ei.value.code == 0
        assert "usage: rollhub" in capsys.readouterr().out


def test_usage_errors_exit_2(capsys, tmp_path):
    with pytest.raises(SystemExit) as ei:
        main(["--log-level", "chatty", "plugins"])
    assert ei.value.code == 2
    assert main([]) == 2
    bad = tmp_path / "rollhub.toml"
    bad.write_text("[experiment]\nn_samples = 0\n")
    assert main(["config", "check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].startswith("rollhub: error: ")
    assert "experiment.n_samples" in err and "Traceback" not in err


def test_a_component_option_set_by_a_variable_names_the_variable(capsys, tmp_path, monkeypatch):
    cfg = tmp_path / "rollhub.toml"
    cfg.write_text('[experiment]\nname = "x"\n')
    monkeypatch.setenv("ROLLHUB_TRAINER__LEARNING_RATE", "0")  # the export trainer has none
    assert main(["config", "check", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "trainer.learning_rate" in err
    assert "set by ROLLHUB_TRAINER__LEARNING_RATE in the environment" in err


def test_runtime_failure_exits_1_with_one_line(capsys, tmp_path, monkeypatch):
    from rollhub.commands import plugins as plugins_cmd

    def explode(args):
        raise OSError("disk on fire")

    monkeypatch.setattr(plugins_cmd, "run", explode)
    assert main(["plugins"]) == 1
    err = capsys.readouterr().err
    assert (
        err.strip() == "rollhub: error: OSError: disk on fire (run with --debug for the traceback)"
    )
    assert main(["--debug", "plugins"]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_run_without_dataset_is_a_config_error(tmp_path, capsys):
    cfg = tmp_path / "rollhub.toml"
    (tmp_path / "agent.py").write_text("app = None\n")
    cfg.write_text("[experiment]\nname = 'x'\n[runtime]\napp = 'agent.py:app'\n")
    assert main(["run", str(cfg)]) == 2
    assert "experiment.dataset is not set" in capsys.readouterr().err


def test_a_prompt_without_the_stratify_field_is_refused_before_the_run_starts(tmp_path, capsys):
    data = tmp_path / "prompts.jsonl"
    data.write_text('{"id": "a", "split": "x"}\n{"id": "b"}\n{"id": "c", "split": "y"}\n')
    cfg = tmp_path / "rollhub.toml"
    cfg.write_text(
        "[experiment]\nname = 'x'\ndataset = 'prompts.jsonl'\nid_field = 'id'\n"
        f"output_dir = '{tmp_path / 'runs'}'\n[training]\nstratify = 'split'\n"
        "[runtime]\napp = 'agent.py:app'\n"
    )
    (tmp_path / "agent.py").write_text("app = None\n")
    assert main(["run", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "training.stratify = 'split'" in err and "id 'b'" in err, err
    assert not (tmp_path / "runs").exists()  # refused before a run directory was made
