"""The adapters' configuration, errors, lazy imports and component registration."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points
from typing import Any

import pytest
import rollhub_frameworks
from rollhub.errors import ConfigError, PluginError
from rollhub.plugins import build_host
from rollhub.rollout import RolloutConfig
from rollhub_frameworks import langgraph_chat_model, strands_model
from rollhub_frameworks.langgraph import LangGraphFramework
from rollhub_frameworks.strands import StrandsFramework

BASE = {
    "exp_id": "exp",
    "input_id": "q1",
    "session_id": "s1",
    "result_store": "file:///tmp/unused",
    "base_url": "http://127.0.0.1:9/v1",
    "model_id": "policy",
    "api_key": "sess-key",
    "sampling": {"temperature": 0.5, "top_p": 0.9, "max_tokens": 64, "top_k": 20},
}


def rollout(**changes: Any) -> RolloutConfig:
    return RolloutConfig.model_validate({**BASE, **changes})


def test_importing_the_package_and_plugin_loads_no_framework():
    code = (
        "import sys, rollhub_frameworks, rollhub_frameworks.plugin\n"
        "heavy = ('strands', 'langgraph', 'langchain_core', 'langchain_openai', 'openai')\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & set(heavy)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


def test_lazy_exports_resolve_and_unknown_names_fail():
    assert rollhub_frameworks.strands_model is strands_model
    assert rollhub_frameworks.LangGraphFramework is LangGraphFramework
    assert "langgraph_chat_model" in dir(rollhub_frameworks)
    with pytest.raises(AttributeError, match="no_such_thing"):
        _ = rollhub_frameworks.no_such_thing


def test_strands_model_points_at_the_rollout_endpoint():
    model = strands_model(rollout())
    assert model.client_args == {"base_url": "http://127.0.0.1:9/v1", "api_key": "sess-key"}
    assert model.config["model_id"] == "policy"
    assert model.config["params"] == {
        "temperature": 0.5,
        "top_p": 0.9,
        "max_tokens": 64,
        "extra_body": {"top_k": 20},
    }


def test_strands_overrides_merge_params_and_client_args():
    model = strands_model(
        rollout(),
        params={"temperature": 0.0, "extra_body": {"min_p": 0.1}},
        client_args={"timeout": 5},
    )
    params = model.config["params"]
    assert params["temperature"] == 0.0 and params["top_p"] == 0.9
    assert params["extra_body"] == {"top_k": 20, "min_p": 0.1}
    assert model.client_args["timeout"] == 5
    assert model.client_args["base_url"] == "http://127.0.0.1:9/v1"


def test_langgraph_chat_model_points_at_the_rollout_endpoint():
    llm = langgraph_chat_model(rollout(sampling={"max_completion_tokens": 32, "top_k": 5}))
    assert llm.model_name == "policy"
    assert llm.openai_api_base == "http://127.0.0.1:9/v1"
    assert llm.openai_api_key.get_secret_value() == "sess-key"
    assert llm.max_tokens == 32
    assert llm.extra_body == {"top_k": 5}
    full = langgraph_chat_model(rollout(), temperature=0.0, extra_body={"min_p": 0.1})
    assert (full.temperature, full.top_p, full.max_tokens) == (0.0, 0.9, 64)
    assert full.extra_body == {"top_k": 20, "min_p": 0.1}


def test_a_raw_rollout_dict_and_a_missing_key_are_accepted():
    raw = {k: v for k, v in BASE.items() if k != "api_key"}
    llm = langgraph_chat_model(raw)
    assert llm.openai_api_key.get_secret_value()  # the SDK needs a non-empty key
    assert strands_model(raw).client_args["api_key"]


@pytest.mark.parametrize("field", ["base_url", "model_id"])
@pytest.mark.parametrize("factory", [strands_model, langgraph_chat_model])
def test_missing_endpoint_fields_name_the_field_and_the_fix(factory, field):
    with pytest.raises(ConfigError, match=rf"_rollout\.{field} is not set") as info:
        factory(rollout(**{field: None}))
    assert info.value.field == f"_rollout.{field}"
    assert "trainer side must put" in str(info.value)


def test_an_invalid_rollout_is_a_config_error():
    with pytest.raises(ConfigError, match="_rollout is invalid"):
        strands_model({"base_url": "http://127.0.0.1:9/v1"})
    with pytest.raises(ConfigError, match=r"context\.rollout"):
        langgraph_chat_model("http://127.0.0.1:9/v1")  # type: ignore[arg-type]


def test_a_missing_framework_package_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "strands.models.openai", None)
    monkeypatch.setitem(sys.modules, "langchain_openai", None)
    with pytest.raises(PluginError, match=r"rollhub-frameworks\[strands\]"):
        strands_model(rollout())
    with pytest.raises(PluginError, match=r"rollhub-frameworks\[langgraph\]"):
        langgraph_chat_model(rollout())


def test_components_are_registered_by_the_plugin():
    import rollhub_frameworks.plugin as plugin

    assert any(
        ep.name == "frameworks" and ep.value == "rollhub_frameworks.plugin"
        for ep in entry_points(group="rollhub")
    )
    host = build_host(entry_points=False, plugins=[plugin])
    assert host.registry.get("framework", "strands") is StrandsFramework
    assert host.registry.get("framework", "langgraph") is LangGraphFramework
    model = StrandsFramework().model_from_rollout(rollout())
    assert model.config["model_id"] == "policy"
    assert LangGraphFramework().model_from_rollout(rollout()).model_name == "policy"
