"""A run's config read as the gateway's typed engine options (what the torch trainer uses)."""

from __future__ import annotations

import tomllib

import pytest
from rollhub.config import RollhubConfig, parse_config
from rollhub.errors import ConfigError, UnknownComponentError
from rollhub_gateway.engines.configured import (
    engine_model,
    gateway_options,
    in_process,
    transformers_options,
)


def _config(toml: str) -> RollhubConfig:
    return parse_config(tomllib.loads(toml), env={})


def test_the_transformers_engine_options_of_an_in_process_gateway() -> None:
    cfg = _config(
        '[token_source]\nname = "gateway"\n'
        'engine = { name = "transformers", options = { model = "/models/m", dtype = "bfloat16" } }\n'
    )
    gateway = gateway_options(cfg)
    assert gateway is not None and in_process(gateway)
    engine = transformers_options(gateway)
    assert engine is not None and (engine.model, engine.dtype) == ("/models/m", "bfloat16")


def test_defaults_a_pool_a_remote_gateway_and_other_sources() -> None:
    gateway = gateway_options(_config('[token_source]\nname = "gateway"\n'))
    engine = transformers_options(gateway) if gateway else None
    assert engine is not None and engine.model == "smollm2-135m-instruct"

    remote = gateway_options(
        _config('[token_source]\nname = "gateway"\nurl = "http://127.0.0.1:9"\n')
    )
    assert remote is not None and not in_process(remote)

    scripted = gateway_options(
        _config('[token_source]\nname = "gateway"\nengine = { name = "scripted" }\n')
    )
    assert scripted is not None and transformers_options(scripted) is None

    assert gateway_options(_config('[token_source]\nname = "none"\n')) is None
    assert gateway_options(None) is None


def test_a_misspelt_option_names_its_field() -> None:
    gateway = gateway_options(
        _config(
            '[token_source]\nname = "gateway"\nengine = { name = "transformers", options = { modle = "x" } }\n'
        )
    )
    assert gateway is not None
    with pytest.raises(ConfigError, match="modle") as err:
        transformers_options(gateway)
    assert err.value.field == "token_source.engine.options.modle"

    with pytest.raises(ConfigError, match="prot") as err:
        gateway_options(_config('[token_source]\nname = "gateway"\nprot = 1\n'))
    assert err.value.field == "token_source.prot"


def test_the_model_a_trainer_in_this_process_must_train() -> None:
    def model_of(engine: str) -> str:
        return engine_model(_config(f'[token_source]\nname = "gateway"\nengine = {engine}\n'))

    assert model_of('{ name = "transformers", options = { model = "/models/m" } }') == "/models/m"
    assert model_of('{ name = "transformers" }') == "smollm2-135m-instruct"
    # another engine names its model in its own options
    assert model_of('{ name = "vllm", options = { model = "/models/v" } }') == "/models/v"
    assert model_of('{ name = "scripted" }') == "smollm2-135m-instruct"
    assert engine_model(_config('[token_source]\nname = "none"\n')) == "smollm2-135m-instruct"
    assert engine_model(None) == "smollm2-135m-instruct"
    # a misspelt key of the transformers engine fails here as it would in the gateway,
    # instead of training the default model beside an engine that never starts
    with pytest.raises(ConfigError, match="modle") as err:
        model_of('{ name = "transformers", options = { modle = "/models/m" } }')
    assert err.value.field == "token_source.engine.options.modle"


@pytest.mark.parametrize(
    ("token_source", "field", "words"),
    [
        ('engine = { name = "transformer" }', "token_source.engine.name", "did you mean"),
        ('engine = { name = "transformers", options = { max_batch = 8 } }',
         "token_source.engine.options.max_batch", "unknown key"),
        ('model = "smollm2-135m-instrct"', "token_source.model", "neither"),
        ('engine = { name = "transformers", options = { model = "/no/such/model" } }',
         "token_source.engine.options.model", "neither"),
    ],
)
def test_config_check_refuses_an_engine_the_gateway_could_not_build(
    tmp_path, token_source, field, words
) -> None:
    # said by `rollhub config check`, not by `rollhub run` after its run directory exists
    from rollhub.commands.checks import check_run_config

    (tmp_path / "agent.py").write_text("app = None\n")
    cfg = _config(
        f'[experiment]\noutput_dir = "{tmp_path / "runs"}"\n'
        f'[runtime]\napp = "{tmp_path / "agent.py"}:app"\n'
        f'[token_source]\nname = "gateway"\n{token_source}\n'
    )
    with pytest.raises((ConfigError, UnknownComponentError)) as err:
        check_run_config(cfg)
    assert field in str(err.value) and words in str(err.value), str(err.value)


def test_config_check_leaves_a_remote_gateways_engine_to_it(tmp_path) -> None:
    from rollhub.commands.checks import check_run_config

    (tmp_path / "agent.py").write_text("app = None\n")
    check_run_config(_config(
        f'[experiment]\noutput_dir = "{tmp_path / "runs"}"\n'
        f'[runtime]\napp = "{tmp_path / "agent.py"}:app"\n'
        '[token_source]\nname = "gateway"\nurl = "http://127.0.0.1:9"\n'
        'engine = { name = "vllm", options = { model = "served-name" } }\n'
    ))  # fmt: skip


def test_a_launched_backend_brings_the_gateways_model(tmp_path) -> None:
    # slime and verl give the gateway their --hf-checkpoint: the config's model is not read
    from rollhub.commands.checks import check_run_config

    (tmp_path / "agent.py").write_text("app = None\n")
    check_run_config(_config(
        f'[experiment]\noutput_dir = "{tmp_path / "runs"}"\n'
        f'[runtime]\napp = "{tmp_path / "agent.py"}:app"\n'
        '[token_source]\nname = "gateway"\nmodel = "/not/on/this/machine"\n'
        'engine = { name = "slime-router" }\n[trainer]\nname = "slime"\n'
    ))  # fmt: skip
