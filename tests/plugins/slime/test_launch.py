"""The launch helper writes slime's arguments and the --custom-config-path file."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from rollhub.errors import ConfigError
from rollhub_slime.launch import CUSTOM_CONFIG_NAME, main, write_launch_files

CONFIG = """
[experiment]
n_samples = 8
sampling = { temperature = 0.8, max_tokens = 1024 }

[token_source]
name = "gateway"
engine = { name = "slime-router", options = { router_policy = "consistent_hashing" } }

[trainer]
name = "slime"
"""


@pytest.fixture
def toml(tmp_path: Path) -> Path:
    path = tmp_path / "rollhub.toml"
    path.write_text(CONFIG)
    return path


def test_arguments_and_custom_config(toml: Path, tmp_path: Path):
    out = tmp_path / "launch"
    args = write_launch_files(toml, out)
    custom = out / CUSTOM_CONFIG_NAME
    assert args == [
        "--rollout-function-path", "rollhub_slime.rollout.generate_rollout",
        "--custom-reward-post-process-path", "rollhub_slime.rewards.post_process_rewards",
        "--custom-config-path", str(custom.resolve()),
        "--n-samples-per-prompt", "8",
        "--rollout-temperature", "0.8",
        "--rollout-max-response-len", "1024",
        "--router-policy", "consistent_hashing",
    ]  # fmt: skip
    # JSON is YAML: slime's yaml.safe_load sets args.rollhub_config from it
    assert json.loads(custom.read_text()) == {"rollhub_config": str(toml.resolve())}


def test_generate_mode(toml: Path, tmp_path: Path):
    args = write_launch_files(toml, tmp_path, mode="generate")
    assert args[:2] == ["--custom-generate-function-path", "rollhub_slime.rollout.generate"]
    assert "--rollout-function-path" not in args
    with pytest.raises(ConfigError, match="mode must be 'rollout' or 'generate'"):
        write_launch_files(toml, tmp_path, mode="train")


def test_refuses_a_config_without_the_slime_trainer(tmp_path: Path):
    path = tmp_path / "rollhub.toml"
    path.write_text('[trainer]\nname = "export"\n')
    with pytest.raises(ConfigError, match=r"trainer.name is 'export'"):
        write_launch_files(path, tmp_path / "out")
    assert not (tmp_path / "out" / CUSTOM_CONFIG_NAME).exists()


def test_command_line(toml: Path, tmp_path: Path, capsys):
    assert main([str(toml), "--out", str(tmp_path)]) == 0
    printed = shlex.split(capsys.readouterr().out)
    assert printed[:2] == ["--rollout-function-path", "rollhub_slime.rollout.generate_rollout"]
    assert main([str(tmp_path / "missing.toml")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_runs_as_a_module(toml: Path, tmp_path: Path):
    done = subprocess.run(
        [sys.executable, "-m", "rollhub_slime.launch", str(toml), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "--custom-config-path" in done.stdout
    assert (tmp_path / CUSTOM_CONFIG_NAME).exists()


def test_a_bad_slime_setting_fails_before_slime_starts(tmp_path: Path):
    path = tmp_path / "rollhub.toml"
    path.write_text(CONFIG + '\n[plugins.slime]\ndrop_empty = "sometimes"\n')
    with pytest.raises(ConfigError, match=r"plugins\.slime\.drop_empty") as info:
        write_launch_files(path, tmp_path / "out")
    assert info.value.field == "plugins.slime.drop_empty"
    assert not (tmp_path / "out" / CUSTOM_CONFIG_NAME).exists()


def test_drop_empty_is_refused_as_it_would_break_slimes_step(tmp_path: Path):
    # slime builds its optimizer steps from the sample count: leaving failed rollouts out
    # makes a step short of rollout_batch_size x n (dp_schedule asserts, or drops some)
    path = tmp_path / "rollhub.toml"
    path.write_text(CONFIG + "\n[plugins.slime]\ndrop_empty = true\n")
    with pytest.raises(ConfigError, match=r"drop_empty = true is no longer supported") as info:
        write_launch_files(path, tmp_path / "out")
    assert info.value.field == "plugins.slime.drop_empty"
    path.write_text(CONFIG + "\n[plugins.slime]\ndrop_empty = false\n")  # older configs load
    assert "--rollout-function-path" in write_launch_files(path, tmp_path / "out")
