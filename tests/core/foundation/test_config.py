"""Every class of config error names the field, the bad value and the fix."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict, Field
from rollhub.config import load_config, parse_config
from rollhub.errors import ConfigError, UnknownComponentError
from rollhub.plugins import build_host
from rollhub.registry import ComponentRegistry, build_options


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "rollhub.toml"
    p.write_text(text)
    return p


def test_defaults_and_relative_paths(tmp_path):
    cfg = load_config(write(tmp_path, '[experiment]\nname = "demo"\ndataset = "data/x.jsonl"\n'))
    assert cfg.experiment.resolved_exp_id == "demo"
    assert cfg.runtime.name == "local"
    assert cfg.store.scheme == "file"
    assert cfg.path(cfg.experiment.dataset) == tmp_path / "data" / "x.jsonl"


def test_unknown_key_names_it_and_suggests(tmp_path):
    with pytest.raises(ConfigError) as ei:
        load_config(write(tmp_path, "[experiment]\nn_sample = 4\n"))
    msg = str(ei.value)
    assert "unknown key 'experiment.n_sample'" in msg
    assert "did you mean 'n_samples'?" in msg
    assert ei.value.field == "experiment.n_sample"


def test_unknown_top_level_section(tmp_path):
    with pytest.raises(
        ConfigError, match=r"unknown key 'runtme' \(did you mean 'runtime'\?\); valid keys"
    ):
        load_config(write(tmp_path, '[runtme]\nname = "local"\n'))


def test_bad_type_names_field_and_value(tmp_path):
    with pytest.raises(ConfigError) as ei:
        load_config(write(tmp_path, '[experiment]\nn_samples = "four"\n'))
    assert "experiment.n_samples" in str(ei.value)
    assert "'four'" in str(ei.value)


def test_bad_choice_lists_valid_choices(tmp_path):
    with pytest.raises(ConfigError) as ei:
        load_config(write(tmp_path, '[rewards]\non_failure = "ignore"\n'))
    msg = str(ei.value)
    assert "rewards.on_failure" in msg and "'ignore'" in msg
    assert "exclude_episode" in msg and "drop_group" in msg and "zero_reward" in msg


def test_invalid_toml_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(write(tmp_path, "[experiment\n"))
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")


def test_env_overrides_file(tmp_path):
    cfg = load_config(
        write(tmp_path, "[experiment]\nn_samples = 2\n"),
        env={
            "ROLLHUB_EXPERIMENT__N_SAMPLES": "8",
            "ROLLHUB_RUNTIME__WORKERS": "3",
            "ROLLHUB_STORE__URL": "s3://bucket/prefix",
            "UNRELATED": "x",
        },
    )
    assert cfg.experiment.n_samples == 8
    assert cfg.runtime.options == {"workers": 3}
    assert cfg.store.url == "s3://bucket/prefix"


def test_env_override_errors_name_the_field(tmp_path):
    with pytest.raises(ConfigError, match=r"experiment\.concurrency"):
        parse_config({}, env={"ROLLHUB_EXPERIMENT__CONCURRENCY": "0"})


class _Opts(BaseModel):
    model_config = ConfigDict(extra="forbid")
    workers: int = Field(1, ge=1)


class _Runtime:
    name = "fake"
    Options = _Opts


def test_component_options_validated_with_section_prefix():
    reg = ComponentRegistry()
    reg.add_runtime(_Runtime)
    cls, opts = build_options(reg, "runtime", "fake", {"workers": 2}, section="runtime")
    assert cls is _Runtime and opts.workers == 2
    with pytest.raises(ConfigError) as ei:
        build_options(reg, "runtime", "fake", {"worker": 2}, section="runtime")
    assert "unknown key 'runtime.worker' (did you mean 'workers'?)" in str(ei.value)
    with pytest.raises(
        ConfigError, match=r"runtime.workers: .*greater than or equal to 1 \(got 0\)"
    ):
        build_options(reg, "runtime", "fake", {"workers": 0}, section="runtime")


def test_unknown_component_lists_installed_and_suggests():
    reg = ComponentRegistry()
    reg.add_runtime(_Runtime)
    with pytest.raises(UnknownComponentError) as ei:
        reg.get("runtime", "fak", field="runtime.name")
    msg = str(ei.value)
    assert "no runtime named 'fak' (runtime.name); installed: fake; did you mean 'fake'?" == msg


def test_component_of_missing_distribution_says_what_to_install(monkeypatch):
    from rollhub import registry as registry_mod

    monkeypatch.setitem(registry_mod.KNOWN_DISTRIBUTIONS, ("trainer", "far"), "rollhub-far-away")
    reg = ComponentRegistry()
    with pytest.raises(UnknownComponentError) as ei:
        reg.get("trainer", "far", field="trainer.name")
    assert "it ships in rollhub-far-away: pip install 'rollhub-far-away'" in str(ei.value)


def test_component_missing_from_an_installed_distribution_says_so(monkeypatch):
    from rollhub import registry as registry_mod

    # rollhub-sandbox is installed in the test environment but provides no trainer
    monkeypatch.setitem(registry_mod.KNOWN_DISTRIBUTIONS, ("trainer", "sbx"), "rollhub-sandbox")
    with pytest.raises(UnknownComponentError) as ei:
        ComponentRegistry().get("trainer", "sbx", field="trainer.name")
    assert "rollhub-sandbox is installed but this version provides no trainer 'sbx'" in str(
        ei.value
    )


def test_unknown_plugin_settings_table_is_rejected(tmp_path):
    from rollhub.plugin_host.settings import check_config

    cfg = parse_config({"plugins": {"sandbxo": {"x": 1}}}, env={})
    host = build_host(entry_points=False)
    with pytest.raises(
        ConfigError, match=r"\[plugins.sandbxo\] configures a plugin that is not loaded"
    ):
        check_config(host, cfg)


def test_plugin_check_config_hook_runs(tmp_path):
    from rollhub import hookimpl
    from rollhub.plugin_host.settings import check_config

    class Strict:
        @hookimpl
        def rollhub_check_config(self, config):
            if config.plugins.settings("strict").get("level") not in (None, "high"):
                raise ConfigError(
                    "plugins.strict.level must be 'high'", field="plugins.strict.level"
                )

    host = build_host(entry_points=False)
    host.register(Strict(), name="strict")
    check_config(host, parse_config({"plugins": {"strict": {"level": "high"}}}, env={}))
    with pytest.raises(ConfigError, match=r"plugins\.strict\.level"):
        check_config(host, parse_config({"plugins": {"strict": {"level": "low"}}}, env={}))


def test_plugin_module_beside_the_config_file_is_found(tmp_path):
    (tmp_path / "beside_plugin.py").write_text(
        "from rollhub import hookimpl\n"
        "class T:\n    name = 'beside'\n"
        "@hookimpl\n"
        "def rollhub_register_components(registry):\n    registry.add_trainer(T)\n"
    )
    cfg_path = tmp_path / "rollhub.toml"
    cfg_path.write_text('[plugins]\nmodules = ["beside_plugin"]\n[trainer]\nname = "beside"\n')
    cfg = load_config(cfg_path, env={})
    host = build_host(entry_points=False, modules=cfg.plugins.modules, search_dir=cfg.base_dir)
    assert host.registry.get("trainer", "beside").__name__ == "T"


def test_plugin_modules_from_config_are_loaded(tmp_path, monkeypatch):
    (tmp_path / "my_local_plugin.py").write_text(
        "from rollhub import hookimpl\n"
        "class T:\n    name = 'mine'\n"
        "@hookimpl\n"
        "def rollhub_register_components(registry):\n    registry.add_trainer(T)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = parse_config({"plugins": {"modules": ["my_local_plugin"]}, "trainer": {"name": "mine"}})
    host = build_host(entry_points=False, modules=cfg.plugins.modules)
    assert host.registry.get("trainer", "mine").__name__ == "T"
    assert host.plugins["my_local_plugin"].source == "config"


def test_missing_plugin_module_is_a_clear_error():
    with pytest.raises(Exception) as ei:
        build_host(entry_points=False, modules=["no_such_plugin_module"])
    assert "plugin module 'no_such_plugin_module' (plugins.modules) could not be imported" in str(
        ei.value
    )


def test_config_error_pickles():
    err = ConfigError("x: bad", field="x")
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is ConfigError and again.field == "x" and str(again) == "x: bad"


def test_the_closest_name_is_suggested_not_the_first_registered():
    reg = ComponentRegistry()
    for word in ("export", "print"):  # a built-in first, then a plugin's
        reg.add_runtime(type(f"_{word}", (), {"name": word, "Options": _Opts}))
    with pytest.raises(UnknownComponentError, match=r"did you mean 'print'\?"):
        reg.get("runtime", "prnt", field="runtime.name")


def test_an_error_from_an_environment_override_names_the_variable():
    # the key is not in the file: the message must say where it came from
    with pytest.raises(ConfigError) as ei:
        parse_config({"experiment": {"name": "x"}}, env={"ROLLHUB_EXPERIMENT__N_SAMPLE": "3"},
                     source="rollhub.toml")  # fmt: skip
    assert "experiment.n_sample" in str(ei.value)
    assert "ROLLHUB_EXPERIMENT__N_SAMPLE" in str(ei.value)
    with pytest.raises(ConfigError, match="ROLLHUB_EXPERIMENT__CONCURRENCY"):
        parse_config({}, env={"ROLLHUB_EXPERIMENT__CONCURRENCY": "0"})
