"""``[trainer] name = "verl"``: config check, install hint, and ``rollhub run`` refusing it.

verl is not installed in this environment (it pins older transformers), so the missing-verl
path is the real one here; verl_side/test_config_with_verl.py checks the installed path.
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import pytest
from rollhub.commands import config as config_command
from rollhub.config import load_config
from rollhub.errors import ConfigError, UsageError
from rollhub_verl.checks import check_verl_config
from rollhub_verl.outputs import Budget
from rollhub_verl.trainer import VerlTrainer, inside_agent_loop
from rollhub_verl.worker_hub import worker_config

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("verl") is not None, reason="covers the environment without verl"
)


def write(tmp_path: Path, token_source: str = 'name = "gateway"', trainer: str = "") -> Path:
    path = tmp_path / "rollhub.toml"
    path.write_text(f'[token_source]\n{token_source}\n[trainer]\nname = "verl"\n{trainer}\n')
    return path


def test_config_check_without_verl_gives_the_install_hint(tmp_path: Path):
    args = argparse.Namespace(file=str(write(tmp_path)))
    with pytest.raises(ConfigError, match=r"pip install 'rollhub-verl\[verl\]'") as info:
        config_command.run(args)
    assert info.value.field == "trainer.name"


def test_unknown_setting_names_the_key(tmp_path: Path, monkeypatch):
    monkeypatch.setattr("rollhub_verl.checks.verl_version", lambda: "0.9.1")
    table = "[plugins.verl]\nreward_sorce = 'verl'"
    args = argparse.Namespace(file=str(write(tmp_path, trainer=table)))
    with pytest.raises(ConfigError, match=r"reward_sorce.*did you mean 'reward_source'") as info:
        config_command.run(args)
    assert info.value.field == "plugins.verl.reward_sorce"


@pytest.mark.parametrize(
    ("token_source", "field"),
    [
        ('name = "none"', "token_source.name"),
        ('name = "gateway"\nurl = "http://gw:8790"\nadmin_token = "t"', "token_source.url"),
        ('name = "gateway"\nengine = { name = "vllm" }', "token_source.engine.name"),
    ],
)
def test_token_source_must_be_the_in_process_gateway_on_verl(
    tmp_path, monkeypatch, token_source, field
):
    monkeypatch.setattr("rollhub_verl.checks.verl_version", lambda: "0.9.1")
    with pytest.raises(ConfigError) as info:
        check_verl_config(load_config(write(tmp_path, token_source)))
    assert info.value.field == field


def test_worker_config_points_the_gateway_at_verl(tmp_path, monkeypatch):
    monkeypatch.setattr("rollhub_verl.checks.verl_version", lambda: "0.9.1")
    cfg = load_config(write(tmp_path, 'name = "gateway"\npolicy = { max_turns = 4 }'))
    out = worker_config(cfg, budget=Budget(512, 256), model_dir="/models/qwen")
    opts = out.token_source.options
    assert opts["engine"] == {"name": "verl"} and opts["model"] == "/models/qwen"
    assert opts["policy"] == {"max_turns": 4, "max_tokens_cap": 256, "max_context_tokens": 768}
    assert cfg.token_source.options.get("engine") is None  # the user's config is untouched
    with pytest.raises(ConfigError, match=r"token_source\.model"):
        worker_config(cfg, budget=Budget(512, 256), model_dir=None)


async def test_rollhub_run_is_sent_to_rollhub_verl(tmp_path, monkeypatch):
    from rollhub.hubs.async_hub import AsyncHub

    monkeypatch.setattr("rollhub_verl.checks.verl_version", lambda: "0.9.1")
    path = write(tmp_path)
    path.write_text(path.read_text() + '[runtime]\napp = "agent.py:app"\n')
    hub = AsyncHub(load_config(path))
    with pytest.raises(UsageError, match="rollhub verl"):
        await hub.start()  # refused before the gateway or any worker starts
    assert hub._parts is None and not hub._started  # no component was kept, none started
    with inside_agent_loop():
        trainer = VerlTrainer()
    with pytest.raises(UsageError, match="rollhub verl"):
        await trainer.consume(None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("version", "ok"),
    [
        ("0.9.1", True),
        ("0.9.3.post1", True),
        ("0.9.0", False),
        ("0.10.0.dev0", False),
        ("x", False),
    ],
)
def test_supported_verl_versions(version, ok):
    from rollhub_verl.checks import is_supported

    assert is_supported(version) is ok


def test_an_untested_verl_is_a_warning_not_an_error(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr("rollhub_verl.checks.verl_version", lambda: "0.10.0")
    check_verl_config(load_config(write(tmp_path)))
    assert "rollhub-verl is tested with verl >=0.9.1,<0.10" in caplog.text
