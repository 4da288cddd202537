"""``[plugins.verl]``: verl's launch settings, validated by the plugin; the older
``[trainer]`` spelling still works with one warning."""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import pytest
from rollhub.commands import config as config_command
from rollhub.config import load_config
from rollhub.errors import ConfigError
from rollhub.training import launch_settings
from rollhub_verl.launch import build_command
from rollhub_verl.settings import verl_settings

# verl's agent loop runs the agents through this runtime: config check wants its app
HEAD = (
    '[runtime]\napp = "agent.py:app"\n[token_source]\nname = "gateway"\n'
    '[trainer]\nname = "verl"\n'
)
NEW = HEAD + """
[plugins.verl]
reward_source = "verl"
args = ["+ray_kwargs.ray_init.num_cpus=8"]

[plugins.verl.overrides]
"algorithm.adv_estimator" = "grpo"
"""
OLD = HEAD + """reward_source = "verl"
args = ["+ray_kwargs.ray_init.num_cpus=8"]

[trainer.overrides]
"algorithm.adv_estimator" = "grpo"
"""


@pytest.fixture(autouse=True)
def _verl_and_fresh_warnings(monkeypatch):
    monkeypatch.setattr("rollhub_verl.checks.verl_version", lambda: "0.9.1")
    monkeypatch.setattr(launch_settings, "_warned", set())


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "agent.py").write_text("app = None\n")
    path = tmp_path / "rollhub.toml"
    path.write_text(text)
    return path


def test_the_new_section_passes_config_check_and_is_what_launch_reads(tmp_path, capsys):
    path = write(tmp_path, NEW)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new spelling warns about nothing
        assert config_command.run(argparse.Namespace(file=str(path))) == 0
        settings = verl_settings(load_config(path))
    assert "trainer=verl" in capsys.readouterr().out
    assert settings.reward_source == "verl"
    assert settings.overrides == {"algorithm.adv_estimator": "grpo"}


def test_a_bad_key_in_the_new_section_is_named_with_the_fix(tmp_path):
    path = write(tmp_path, NEW.replace("reward_source", "reward_sorce"))
    with pytest.raises(ConfigError, match=r"'plugins\.verl\.reward_sorce' \(did you mean "
                       r"'reward_source'\?\)") as info:
        config_command.run(argparse.Namespace(file=str(path)))
    assert info.value.field == "plugins.verl.reward_sorce"


def test_a_bad_value_in_the_new_section_is_named(tmp_path):
    path = write(tmp_path, NEW.replace('reward_source = "verl"', 'reward_source = "judge"'))
    with pytest.raises(ConfigError, match=r"plugins\.verl\.reward_source: .*'judge'") as info:
        verl_settings(load_config(path))
    assert info.value.field == "plugins.verl.reward_source"


def test_the_old_spelling_warns_once_and_launches_the_same(tmp_path):
    new, old = write(tmp_path, NEW), tmp_path / "old.toml"
    old.write_text(OLD)
    yaml = tmp_path / "agent_loops.yaml"
    expected = build_command(load_config(new), new, yaml, [])
    with pytest.warns(FutureWarning, match=r"move them to \[plugins\.verl\]") as caught:
        assert build_command(load_config(old), old, yaml, []) == expected
        assert verl_settings(load_config(old)).reward_source == "verl"
    assert len([w for w in caught if issubclass(w.category, FutureWarning)]) == 1


def test_the_old_spelling_still_passes_config_check_and_names_its_bad_keys(tmp_path):
    path = write(tmp_path, OLD)
    with pytest.warns(FutureWarning):
        assert config_command.run(argparse.Namespace(file=str(path))) == 0
    path.write_text(OLD.replace("reward_source", "reward_sorce"))
    with pytest.raises(ConfigError, match="did you mean 'reward_source'") as info:
        config_command.run(argparse.Namespace(file=str(path)))
    assert info.value.field == "trainer.reward_sorce"


def test_both_spellings_at_once_are_refused(tmp_path):
    path = write(tmp_path, OLD + '\n[plugins.verl]\nagent_name = "x"\n')
    with pytest.raises(ConfigError, match=r"move the \[trainer\] options into \[plugins\.verl\]"):
        verl_settings(load_config(path))
