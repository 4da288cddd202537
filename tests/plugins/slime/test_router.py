"""The slime-router backend against an SGLang-shaped loopback server."""

from __future__ import annotations

import pytest
from rollhub.errors import ConfigError, GatewayError
from rollhub.plugins import build_host
from rollhub.sampling import SamplingParams, TurnContext
from rollhub_gateway.engines.scripted import scripted_logprob
from rollhub_slime.router import ROUTING_HEADER, SlimeRouterBackend, SlimeRouterOptions

from tests.plugins.slime.slime_stand_ins import run_sync


def generate(backend, prompt, params, turn=None):
    async def go():
        try:
            return await backend.generate(prompt, params, turn=turn)
        finally:
            await backend.close()

    return run_sync(go())


def test_token_ids_in_logprobs_and_version_out(sglang, script):
    backend = SlimeRouterBackend(
        SlimeRouterOptions(base_url=sglang.url, router_policy="consistent_hashing")
    )
    prompt = script.text("What is 2 + 3?", end=False)
    turn = TurnContext(session_id="sess-1", turn_index=0, weight_version=9)
    gen = generate(backend, prompt, SamplingParams(max_tokens=32, temperature=0.7), turn)

    expected = script.text("The answer is 5.")
    assert gen.token_ids == expected
    assert gen.logprobs == pytest.approx([scripted_logprob(i, t) for i, t in enumerate(expected)])
    assert gen.finish_reason == "stop"
    assert gen.weight_version == 3  # the router's "3", not the hub's 9
    [body] = sglang.requests
    assert body["input_ids"] == prompt and body["return_logprob"] is True
    assert body["sampling_params"]["max_new_tokens"] == 32
    assert body["sampling_params"]["temperature"] == 0.7
    assert sglang.headers[0][ROUTING_HEADER] == "sess-1"


def test_no_routing_header_without_consistent_hashing(sglang, script):
    backend = SlimeRouterBackend(SlimeRouterOptions(base_url=sglang.url))
    turn = TurnContext(session_id="sess-2", turn_index=0)
    generate(backend, script.text("hi", end=False), SamplingParams(max_tokens=8), turn)
    assert ROUTING_HEADER not in sglang.headers[0]


def test_length_finish_and_hub_versions(sglang, script):
    backend = SlimeRouterBackend(
        SlimeRouterOptions(base_url=sglang.url, weight_version_source="hub")
    )
    gen = generate(backend, script.text("[long]", end=False), SamplingParams(max_tokens=5))
    assert gen.finish_reason == "length" and len(gen.token_ids) == 5
    assert gen.weight_version is None  # the gateway stamps the hub's version instead


def test_non_numeric_engine_version_falls_back(sglang, script):
    sglang.weight_version = "default"
    backend = SlimeRouterBackend(SlimeRouterOptions(base_url=sglang.url))
    gen = generate(backend, script.text("hi", end=False), SamplingParams(max_tokens=8))
    assert gen.weight_version is None


def test_abort_finish(sglang, script):
    sglang.abort_marker = "[abort]"
    backend = SlimeRouterBackend(SlimeRouterOptions(base_url=sglang.url))
    gen = generate(backend, script.text("[abort] hi", end=False), SamplingParams(max_tokens=32))
    assert gen.finish_reason == "abort" and len(gen.token_ids) == 3


def test_empty_base_url_names_the_field():
    backend = SlimeRouterBackend(SlimeRouterOptions())
    with pytest.raises(ConfigError, match=r"engine\.options\.base_url of the slime-router") as info:
        generate(backend, [1, 2], SamplingParams(max_tokens=4))
    assert info.value.field == "token_source.engine.options.base_url"


def test_unreachable_router_is_a_gateway_error():
    backend = SlimeRouterBackend(
        SlimeRouterOptions(base_url="http://127.0.0.1:9", connect_retries=0)
    )
    with pytest.raises(GatewayError) as info:
        generate(backend, [1, 2], SamplingParams(max_tokens=4))
    assert info.value.unreachable is True


def test_explicit_header_and_unknown_options():
    opts = SlimeRouterOptions(router_policy="consistent_hashing", routing_key_header="X-Key")
    assert opts.routing_key_header == "X-Key"
    assert SlimeRouterOptions(router_policy="round_robin").routing_key_header is None
    with pytest.raises(ValueError, match="routr_policy"):
        SlimeRouterOptions(routr_policy="consistent_hashing")


def test_registered_by_the_installed_plugin():
    registry = build_host().registry
    assert registry.get("sampling_backend", "slime-router") is SlimeRouterBackend
    info = registry.info("trainer", "slime")
    assert info.distribution == "rollhub-slime"
