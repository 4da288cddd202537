"""A model name reaches exactly one policy: clashing policy names and model ids are
refused before anything is served, and a routed call that sends no model is a 400 that
lists the model names (instead of silently going to the first policy)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from rollhub.errors import ConfigError, UsageError
from rollhub_gateway.config import parse_gateway_config
from rollhub_gateway.engines.scripted import ScriptedBackend
from rollhub_gateway.gateway import Gateway
from rollhub_gateway.policies.routes import PolicyRoute, PolicyRoutes

USER = [{"role": "user", "content": "Draft the call."}]


@pytest.mark.parametrize(
    ("policies", "clash"),
    [
        (
            [{"name": "proposer", "model_id": "m"}, {"name": "judge", "model_id": "m"}],
            "policies[1] 'judge' has the model id 'm' of policies[0] 'proposer'",
        ),
        (
            [{"name": "proposer"}, {"name": "proposer", "model_id": "p2"}],
            "policies[1] has the name 'proposer' of policies[0]",
        ),
        (
            # an agent sending "checker" would reach the critic
            [
                {"name": "checker", "model_id": "checker-v1"},
                {"name": "critic", "model_id": "checker"},
            ],
            "policies[1] 'critic' has the model id 'checker', the name of policies[0]",
        ),
        (
            # the same clash, the other way round
            [{"name": "critic", "model_id": "checker"}, {"name": "checker", "model_id": "c1"}],
            "policies[0] 'critic' has the model id 'checker', the name of policies[1]",
        ),
    ],
    ids=["model-id", "name", "model-id-is-a-name", "model-id-is-a-later-name"],
)
def test_a_gateway_config_refuses_model_names_that_reach_two_policies(policies, clash):
    with pytest.raises(ConfigError) as err:
        parse_gateway_config({"policies": policies})
    assert clash in str(err.value)
    assert err.value.context["field"] == "policies"


def test_a_policy_may_be_served_under_its_own_name():
    config = parse_gateway_config(
        {"policies": [{"name": "proposer", "model_id": "proposer"}, {"name": "checker"}]}
    )
    assert [p.served_id for p in config.policies] == ["proposer", "checker"]


def test_routes_built_in_code_refuse_a_shared_model_id():
    routes = [
        PolicyRoute("proposer", "m", ScriptedBackend()),
        PolicyRoute("judge", "m", ScriptedBackend(), trainable=False),
    ]
    with pytest.raises(UsageError, match="the model id 'm' of policies\\[0\\] 'proposer'"):
        PolicyRoutes(routes, version=lambda: None)


def test_run_policies_whose_model_id_is_another_policys_name_are_refused(tmp_path: Path):
    from rollhub.commands.checks import check_run_config
    from rollhub.config import parse_config

    agent = Path(__file__).parents[2] / "core" / "training" / "agents" / "two_policy_agent.py"
    data = {
        "experiment": {"output_dir": str(tmp_path / "runs")},
        "runtime": {"name": "local", "app": f"{agent}:app"},
        "store": {"url": f"file://{tmp_path / 'store'}"},
        "token_source": {"name": "gateway"},
        "trainer": {"name": "torch"},
        "policies": [
            {"name": "checker", "model_id": "checker-v1"},
            {"name": "critic", "model_id": "checker", "trainable": False},
        ],
    }
    # refused where the config is read, before any check or gateway
    with pytest.raises(ConfigError, match="has the model id 'checker', the name of"):
        parse_config(data, env={})
    data["policies"][1]["model_id"] = "critic-v1"
    check_run_config(parse_config(data, env={}))


@pytest.fixture
async def routed(chat_model: Any, config: Any) -> Any:
    """A gateway serving 'proposer' and a frozen 'judge' (model 'judge-v1')."""
    backends = {"proposer": ScriptedBackend(), "judge": ScriptedBackend()}
    routes = [
        PolicyRoute("proposer", "proposer", backends["proposer"], True, 0),
        PolicyRoute("judge", "judge-v1", backends["judge"], False, 0),
    ]
    gw = Gateway(backends["proposer"], chat_model, config, routes=routes)
    await gw.start()
    try:
        yield gw, backends
    finally:
        await gw.close()


async def test_a_routed_call_without_a_model_is_a_400_listing_the_model_ids(routed):
    gw, backends = routed
    s = gw.open_session("no-model")
    async with httpx.AsyncClient(base_url=gw.base_url + "/") as http:
        resp = await http.post(
            "chat/completions",
            json={"messages": USER},
            headers={"Authorization": f"Bearer {s.key}"},
        )
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert error["param"] == "model"
    assert "'model' is required" in error["message"]
    assert "'proposer', 'judge-v1'" in error["message"]
    assert all(b.prompts == [] for b in backends.values())  # nothing was sampled
    assert gw.traces("no-model") == []


async def test_anthropic_callers_without_a_model_get_the_400_in_their_format(routed):
    """A raw request: the Anthropic SDK itself always sends a model."""
    gw, _ = routed
    s = gw.open_session("no-model-anthropic")
    async with httpx.AsyncClient(base_url=gw.url + "/") as http:
        resp = await http.post(
            "v1/messages",
            json={"max_tokens": 8, "messages": USER},
            headers={"x-api-key": s.key, "anthropic-version": "2023-06-01"},
        )
    assert resp.status_code == 400
    body = resp.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "'model' is required" in body["error"]["message"]


async def test_routed_calls_with_a_model_still_reach_their_policy(routed, ids):
    gw, backends = routed
    s = gw.open_session("with-model")
    client = openai.AsyncOpenAI(base_url=gw.base_url, api_key=s.key)
    backends["judge"].add(ids("ACCEPT"))
    reply = await client.chat.completions.create(model="judge-v1", messages=USER)
    assert reply.model == "judge-v1" and backends["proposer"].prompts == []


async def test_a_one_policy_gateway_still_takes_a_call_without_a_model(gateway, scripted, ids):
    s = gateway.open_session("one-policy")
    scripted.add(ids("ok"))
    async with httpx.AsyncClient(base_url=gateway.base_url + "/") as http:
        resp = await http.post(
            "chat/completions",
            json={"messages": USER},
            headers={"Authorization": f"Bearer {s.key}"},
        )
    assert resp.status_code == 200
    assert resp.json()["choices"][0]["message"]["content"] == "ok"
