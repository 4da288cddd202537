"""The one path from config sections to components (the hub's, rLLM's remote runtime's)."""

from __future__ import annotations

import pytest
from rollhub import hookimpl
from rollhub.config import load_config, parse_config
from rollhub.errors import PluginError
from rollhub.plugin_host.components import (
    build_component,
    component_context,
    open_config_store,
    store_url,
)
from rollhub.plugins import build_host
from rollhub.stores.file import FileResultStore

from tests.core.foundation.test_component_context import Components, EchoRuntime


def test_sections_are_built_with_one_context_and_an_absolute_store(tmp_path, monkeypatch):
    (tmp_path / "conf").mkdir()
    path = tmp_path / "conf" / "rollhub.toml"
    path.write_text(
        '[experiment]\nname = "comp"\n\n[runtime]\nname = "echo"\ngreeting = "yo"\n\n'
        '[store]\nurl = "file://results"\n\n[trainer]\nname = "ctx"\n'
    )
    monkeypatch.chdir(tmp_path)
    cfg = load_config(path)
    host = build_host(entry_points=False, plugins=[Components()])
    context = component_context(cfg, run_dir=tmp_path / "run")
    assert (context.base_dir, context.exp_id, context.config) == (path.parent, "comp", cfg)

    runtime = build_component(host.registry, cfg, "runtime", context)
    trainer = build_component(host.registry, cfg, "trainer", component_context(cfg, exp_id="x"))
    assert isinstance(runtime, EchoRuntime) and runtime.context is context
    assert runtime.options.greeting == "yo"
    assert trainer.exp_id == "x" and trainer.run_dir is None

    # relative to the config file, not to the working directory
    assert store_url(cfg) == f"file://{tmp_path / 'conf' / 'results'}"
    store = open_config_store(cfg, host.registry)
    assert isinstance(store, FileResultStore)
    store.put("comp/q/s.json", {"ok": True})
    assert (tmp_path / "conf" / "results" / "comp" / "q" / "s.json").is_file()

    for url in ("s3://bucket/prefix", f"file://{tmp_path / 'abs'}"):
        cfg.store.url = url
        assert store_url(cfg) == url


class NotATrainer:
    """Registered as a trainer without deriving from ``Trainer``."""

    name = "stray"

    def __init__(self, *, context: object) -> None:
        self.context = context


class Stray:
    @hookimpl
    def rollhub_register_components(self, registry):
        registry.add_trainer(NotATrainer)


def test_a_component_that_is_not_of_its_kind_is_refused_naming_the_base(tmp_path):
    cfg = parse_config({"trainer": {"name": "stray"}}, env={})
    host = build_host(entry_points=False, plugins=[Stray()])
    with pytest.raises(
        PluginError,
        match=r"trainer 'stray' is a .*NotATrainer, not a "
        r"rollhub\.training\.trainer\.Trainer",
    ):
        build_component(host.registry, cfg, "trainer", component_context(cfg))
