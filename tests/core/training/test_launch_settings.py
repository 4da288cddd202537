"""A launched backend's settings: ``[plugins.<name>]``, or the older ``[trainer]`` options."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict
from rollhub.config import parse_config
from rollhub.errors import ConfigError
from rollhub.training import launch_settings as module
from rollhub.training.launch_settings import launch_settings


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    steps: int = 1
    mode: str = "fast"


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch):
    monkeypatch.setattr(module, "_warned", set())


def config(**data: object):
    return parse_config({"trainer": {"name": "backend"}, **data}, env={})


def test_reads_the_plugin_table_and_defaults_without_it():
    assert launch_settings(config(), "backend", Settings) == Settings()
    cfg = config(plugins={"backend": {"steps": 3}})
    assert launch_settings(cfg, "backend", Settings).steps == 3


def test_errors_name_the_key_in_the_plugin_table():
    cfg = config(plugins={"backend": {"stpes": 3}})
    with pytest.raises(ConfigError, match=r"'plugins\.backend\.stpes' \(did you mean 'steps'") as e:
        launch_settings(cfg, "backend", Settings)
    assert e.value.field == "plugins.backend.stpes"
    with pytest.raises(ConfigError, match=r"plugins\.backend\.steps: .*'many'"):
        launch_settings(config(plugins={"backend": {"steps": "many"}}), "backend", Settings)


def test_the_older_trainer_spelling_works_with_one_warning():
    cfg = parse_config({"trainer": {"name": "backend", "steps": 2}}, env={})
    with pytest.warns(FutureWarning, match=r"move them to \[plugins\.backend\]") as caught:
        assert launch_settings(cfg, "backend", Settings).steps == 2
        assert launch_settings(cfg, "backend", Settings).steps == 2
    assert len(caught) == 1
    bad = parse_config({"trainer": {"name": "backend", "stpes": 2}}, env={})
    with pytest.raises(ConfigError) as info:
        launch_settings(bad, "backend", Settings)
    assert info.value.field == "trainer.stpes"


def test_another_trainers_options_are_not_read():
    cfg = parse_config({"trainer": {"name": "export", "steps": 9}}, env={})
    assert launch_settings(cfg, "backend", Settings).steps == 1


def test_both_spellings_at_once_are_refused():
    cfg = parse_config(
        {"trainer": {"name": "backend", "steps": 2}, "plugins": {"backend": {"mode": "slow"}}},
        env={},
    )
    with pytest.raises(ConfigError, match=r"move the \[trainer\] options into") as info:
        launch_settings(cfg, "backend", Settings)
    assert info.value.field == "trainer.steps"
