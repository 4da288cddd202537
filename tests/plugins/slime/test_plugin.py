"""Registration of the slime components, config checks, and the trainer's refusal to be fed."""

from __future__ import annotations

import pytest
from rollhub.config import load_config
from rollhub.episode import EpisodeGroup
from rollhub.errors import ConfigError, UsageError
from rollhub.registry import ComponentRegistry
from rollhub.training import launch_settings
from rollhub_slime import plugin
from rollhub_slime.router import SlimeRouterBackend
from rollhub_slime.runner import apply_slime_args
from rollhub_slime.settings import SlimeOptions, slime_settings
from rollhub_slime.trainer import SlimeTrainer

from tests.plugins.slime.slime_stand_ins import run_sync


def test_registers_trainer_and_backend():
    registry = ComponentRegistry()
    plugin.rollhub_register_components(registry)
    assert registry.get("trainer", "slime") is SlimeTrainer
    assert registry.get("sampling_backend", "slime-router") is SlimeRouterBackend


#: slime's rollout function runs the agents through this runtime: config check wants its app
APP = '[runtime]\napp = "agent.py:app"\n'


def test_config_check_accepts_the_slime_trainer(tmp_path, capsys):
    from rollhub.cli import main

    path = tmp_path / "rollhub.toml"
    (tmp_path / "agent.py").write_text("app = None\n")
    path.write_text(
        APP + '[token_source]\nname = "gateway"\nengine = { name = "slime-router" }\n'
        '[trainer]\nname = "slime"\n[plugins.slime]\nprompt_field = "question"\n'
    )
    assert main(["config", "check", str(path)]) == 0
    assert "trainer=slime" in capsys.readouterr().out
    assert slime_settings(load_config(path)).prompt_field == "question"
    path.write_text('[trainer]\nname = "slime"\n[plugins.slime]\nprompt_feild = "question"\n')
    assert main(["config", "check", str(path)]) != 0
    assert "unknown key 'plugins.slime.prompt_feild' (did you mean 'prompt_field'?)" in (
        capsys.readouterr().err
    )


def test_the_older_trainer_spelling_warns_once_and_reads_the_same(tmp_path, monkeypatch, capsys):
    from rollhub.cli import main

    monkeypatch.setattr(launch_settings, "_warned", set())
    path = tmp_path / "rollhub.toml"
    (tmp_path / "agent.py").write_text("app = None\n")
    path.write_text(APP + '[trainer]\nname = "slime"\nprompt_field = "question"\n')
    with pytest.warns(FutureWarning, match=r"move them to \[plugins\.slime\]") as caught:
        assert main(["config", "check", str(path)]) == 0
        assert slime_settings(load_config(path)).prompt_field == "question"
    assert len([w for w in caught if issubclass(w.category, FutureWarning)]) == 1
    path.write_text('[trainer]\nname = "slime"\nprompt_feild = "question"\n')
    assert main(["config", "check", str(path)]) != 0
    assert "unknown key 'trainer.prompt_feild' (did you mean 'prompt_field'?)" in (
        capsys.readouterr().err
    )


def test_trainer_options_and_refusal():
    trainer = SlimeTrainer(SlimeOptions(label_field="answer"))
    assert trainer.options.label_field == "answer" and trainer.options.drop_empty is False
    with pytest.raises(UsageError, match=r"--rollout-function-path rollhub_slime\.rollout"):
        run_sync(trainer.consume(EpisodeGroup("g", {}, [])))
    with pytest.raises(ValueError, match="extra"):
        SlimeOptions(nope=1)


def test_slime_args_fill_router_and_model():
    from types import SimpleNamespace

    from rollhub.config import parse_config

    cfg = parse_config(
        {
            "token_source": {"name": "gateway", "engine": {"name": "slime-router"}},
            "trainer": {"name": "slime"},
        },
        env={},
    )
    args = SimpleNamespace(
        sglang_router_ip="[::1]", sglang_router_port=30000, router_policy="consistent_hashing",
        hf_checkpoint="/models/qwen",
    )  # fmt: skip
    apply_slime_args(cfg, args)
    options = cfg.token_source.options
    assert options["model"] == "/models/qwen"
    assert options["engine"]["options"] == {
        "base_url": "http://[::1]:30000",
        "router_policy": "consistent_hashing",
    }
    # an explicit base_url is kept
    cfg.token_source.options["engine"]["options"]["base_url"] = "http://router:1"
    apply_slime_args(cfg, args)
    assert cfg.token_source.options["engine"]["options"]["base_url"] == "http://router:1"
    with pytest.raises(ConfigError, match=r"trainer\.name is 'export'"):
        apply_slime_args(parse_config({}, env={}), args)


def test_the_hub_reads_its_settings_from_the_slime_section():
    from rollhub.config import parse_config
    from rollhub_slime.runner import SlimeHub

    cfg = parse_config(
        {"trainer": {"name": "slime"}, "plugins": {"slime": {"label_field": "answer"}}}, env={}
    )
    hub = SlimeHub(cfg)
    try:
        assert hub.options.label_field == "answer" and hub.options.prompt_field == "prompt"
    finally:
        hub.close()
